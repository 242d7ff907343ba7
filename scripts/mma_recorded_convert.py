#!/usr/bin/env python3
"""Converts the recorded tensor-core dot products of north-numerical-computing/MATLAB-tensor-core
(model_validation/<GPU>/<format>/{a,b,c,d}_*.txt, BSD-2-Clause, Khattak & Mikaitis) into
data/mma/recorded/<gpu>_<format>.npz, one compressed archive per GPU and input format:

  a, b      (cases, K)  the inputs, in their own encoding: fp16 as float16, bf16 / fp8 as their bits
                        (uint16 / uint8, ml_dtypes' layout), tf32 as float32 values
  c         (cases,)    float32: the addend as the file gives it (the GPU rounded it to fp16 with
                        __float2half before an fp16-output run: model_validation/CUDA/*.cu)
  d_fp32, d_fp16 (cases,) float32: the GPU's result for that output format, as recorded

It also carries the published AMD CDNA models' printed errors (experiments/data/
matmul_test_<in>_binary32_words_<p>_model_<mi100|mi250|mi300x>.dat: MODEL outputs of experiments/
matmul_test_CDNA.m, not hardware results) into <output dir>/../cdna_model_errors.csv, one row per file and n:
input,model,words,n,error,bound, the numbers as printed (%e), checked to be the 20 values of n the script runs.

Usage: mma_recorded_convert.py <git dir of the MATLAB-tensor-core snapshot> <output dir>
Every value is checked to round-trip exactly through its stored encoding.
"""
import math
import re
import subprocess
import sys
import pathlib
import numpy as np
import ml_dtypes

STORED = {'fp16': np.float16, 'bf16': ml_dtypes.bfloat16, 'E4M3': ml_dtypes.float8_e4m3fn,
          'E5M2': ml_dtypes.float8_e5m2, 'tf32': np.float32}
BITS = {'bf16': np.uint16, 'E4M3': np.uint8, 'E5M2': np.uint8}


def show(git_dir, path):
    return subprocess.run(['git', '--git-dir', git_dir, 'show', f'HEAD:{path}'], check=True,
                          capture_output=True, text=True).stdout


def hex_rows(text):
    rows = [[int(h, 16) for h in line.split()] for line in text.splitlines() if line.strip()]
    return np.array(rows, dtype=np.uint32).view(np.float32)


def bit_rows(text):
    return np.array([int(line, 2) for line in text.split()], dtype=np.uint32).view(np.float32)


def convert_cdna(git_dir, csv_path):
    files = subprocess.run(['git', '--git-dir', git_dir, 'ls-tree', '-r', '--name-only', 'HEAD', 'experiments/data'],
                           check=True, capture_output=True, text=True).stdout.split()
    pattern = re.compile(r'experiments/data/matmul_test_(.+)_binary32_words_(\d+)_model_(mi100|mi250|mi300x)\.dat$')
    n_list = [math.floor(10 ** (1 + 5 * i / 19)) for i in range(20)]  # floor(logspace(1, 6, 20))
    rows = []
    for f in files:
        m = pattern.match(f)
        if not m:
            continue
        lines = show(git_dir, f).splitlines()
        assert lines[0].split() == ['n', 'error', 'bound'], (f, lines[0])
        body = [line.split() for line in lines[1:] if line.strip()]
        assert [int(r[0]) for r in body] == n_list, f
        for n, err, bound in body:
            float(err), float(bound)
            rows.append((m.group(1), m.group(3), int(m.group(2)), int(n), err, bound))
    rows.sort(key=lambda r: (r[0], r[1], r[2], r[3]))
    with open(csv_path, 'w') as out:
        out.write('input,model,words,n,error,bound\n')
        for r in rows:
            out.write(','.join(str(x) for x in r) + '\n')
    print(f'{len(rows) // 20} CDNA model files, {len(rows)} rows -> {csv_path}')


def main():
    git_dir, out_dir = sys.argv[1], pathlib.Path(sys.argv[2])
    out_dir.mkdir(parents=True, exist_ok=True)
    files = subprocess.run(['git', '--git-dir', git_dir, 'ls-tree', '-r', '--name-only', 'HEAD', 'model_validation'],
                           check=True, capture_output=True, text=True).stdout.split()
    sets = sorted({tuple(f.split('/')[1:3]) for f in files if f.endswith('.txt')})
    total = 0
    for gpu, fmt in sets:
        d = f'model_validation/{gpu}/{fmt}'
        arrays = {}
        for op in ('a', 'b'):
            values = hex_rows(show(git_dir, f'{d}/{op}_{gpu}_{fmt}.txt'))
            enc = values.astype(STORED[fmt])
            assert np.array_equal(enc.astype(np.float32).view(np.uint32), values.view(np.uint32)), (gpu, fmt, op)
            arrays[op] = enc.view(BITS[fmt]) if fmt in BITS else enc
        arrays['c'] = bit_rows(show(git_dir, f'{d}/c_{gpu}_fp32.txt'))
        for out in ('fp32', 'fp16'):
            p = f'{d}/d_{gpu}_{out}.txt'
            if p in files:
                arrays['d_' + out] = bit_rows(show(git_dir, p))
                total += 1
        np.savez_compressed(out_dir / f'{gpu.lower()}_{fmt.lower()}.npz', **arrays)
        print(gpu, fmt, {k: v.shape for k, v in arrays.items()})
    print(f'{len(sets)} sets, {total} recorded result files')
    convert_cdna(git_dir, out_dir.parent / 'cdna_model_errors.csv')


if __name__ == '__main__':
    main()
