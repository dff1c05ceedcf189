"""Trains the digits MLP and CNN (models/digits/) in f32, bf16 and fp16 AMP with `ampfuse
train`, from the same initial weights, and writes their loss curves as an SVG picture and a
Markdown table (README.md, "Training"). `make digits` runs it; plain Python, no packages.

    python3 scripts/digits_training.py --ampfuse build/ampfuse --svg docs/digits_training.svg
"""
import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..')
DATA = os.path.join(ROOT, 'data', 'digits')

# (model, optimizer options, epochs): the settings README.md's table reports.
RUNS = [
    ('mlp', ['--optimizer', 'sgd', '--lr', '0.1', '--momentum', '0.9'], 20),
    ('cnn', ['--optimizer', 'adam', '--lr', '0.003'], 20),
]
PRECISIONS = ['off', 'bf16', 'fp16']
COLORS = {'off': '#1f77b4', 'bf16': '#d62728', 'fp16': '#2ca02c'}
INJECTED_STEP = 100  # the fp16 runs get an infinite loss scale at this step


def train(ampfuse, model, options, epochs, amp, seed):
    cmd = [ampfuse, 'train', os.path.join(ROOT, 'models', 'digits', 'digits_%s-symbol.json' % model),
           '--data', os.path.join(DATA, 'train_images.npy'), '--labels', os.path.join(DATA, 'train_labels.npy'),
           '--test-data', os.path.join(DATA, 'test_images.npy'), '--test-labels', os.path.join(DATA, 'test_labels.npy'),
           '--amp', amp, '--epochs', str(epochs), '--batch', '32', '--seed', str(seed), '--json'] + options
    if amp == 'fp16':
        cmd += ['--inject-overflow', str(INJECTED_STEP)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def svg(results, path):
    width, height, pad = 420, 260, 45
    panels = []
    for p, (model, runs) in enumerate(results.items()):
        x0 = p * (width + 20)
        epochs = max(len(r['epochs']) for r in runs.values())
        top = max(e['loss'] for r in runs.values() for e in r['epochs'])
        items = ['<g transform="translate(%d,0)">' % x0,
                 '<text x="%d" y="18" font-size="14" font-weight="bold">digits %s: training loss per epoch</text>' % (pad, model),
                 '<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>' % (pad, height - pad, width - 10, height - pad),
                 '<line x1="%d" y1="30" x2="%d" y2="%d" stroke="black"/>' % (pad, pad, height - pad),
                 '<text x="%d" y="%d" font-size="11">epoch</text>' % ((width) // 2, height - 12),
                 '<text x="5" y="%d" font-size="11">%.2f</text>' % (36, top),
                 '<text x="20" y="%d" font-size="11">0</text>' % (height - pad)]
        for k in range(1, epochs + 1, max(1, epochs // 5)):
            x = pad + (width - pad - 10) * (k - 1) / max(1, epochs - 1)
            items.append('<text x="%.1f" y="%d" font-size="10">%d</text>' % (x - 3, height - pad + 14, k))
        for i, (amp, r) in enumerate(runs.items()):
            pts = []
            for e in r['epochs']:
                x = pad + (width - pad - 10) * (e['epoch'] - 1) / max(1, epochs - 1)
                y = (height - pad) - (height - pad - 30) * e['loss'] / top
                pts.append('%.1f,%.1f' % (x, y))
            dash = ' stroke-dasharray="5,3"' if amp == 'fp16' else ''
            items.append('<polyline fill="none" stroke="%s" stroke-width="2"%s points="%s"/>' % (COLORS[amp], dash, ' '.join(pts)))
            label = {'off': 'f32', 'bf16': 'bf16 AMP', 'fp16': 'fp16 AMP (overflow injected)'}[amp]
            acc = r['epochs'][-1]['test_accuracy'] * 100
            items.append('<text x="%d" y="%d" font-size="11" fill="%s">%s: test %.1f%%</text>' % (width - 200, 50 + 15 * i, COLORS[amp], label, acc))
        items.append('</g>')
        panels.append('\n'.join(items))
    with open(path, 'w') as f:
        f.write('<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif">\n' %
                (len(results) * (width + 20), height))
        f.write('<rect width="100%" height="100%" fill="white"/>\n')
        f.write('\n'.join(panels))
        f.write('\n</svg>\n')


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--ampfuse', default=os.path.join(ROOT, 'build', 'ampfuse'))
    ap.add_argument('--svg', default=os.path.join(ROOT, 'docs', 'digits_training.svg'))
    ap.add_argument('--seed', type=int, default=7)
    args = ap.parse_args()
    results = {}
    print('| model | optimizer | epochs | precision | final train loss | test accuracy | skipped steps | final loss scale | s/epoch |')
    print('|---|---|---|---|---|---|---|---|---|')
    for model, options, epochs in RUNS:
        results[model] = {}
        for amp in PRECISIONS:
            r = train(args.ampfuse, model, options, epochs, amp, args.seed)
            results[model][amp] = r
            last = r['epochs'][-1]
            secs = sum(e['seconds'] for e in r['epochs']) / len(r['epochs'])
            print('| %s | %s | %d | %s | %.4f | %.2f%% | %d | %s | %.2f |' % (
                model, r['optimizer'], epochs, {'off': 'f32'}.get(amp, amp + ' AMP'), last['loss'],
                100 * last['test_accuracy'], last['skipped'], last['scale'] if amp != 'off' else '-', secs))
            sys.stdout.flush()
    svg(results, args.svg)
    print('wrote', args.svg)


if __name__ == '__main__':
    main()
