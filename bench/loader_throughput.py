#!/usr/bin/env python3
"""Loader throughput: devgate's batch loader against a PyTorch DataLoader.

Generates a folder of JPEGs (libjpeg, through a small C helper linked against
the built libdevgate.a), then measures images/s for read + decode + resize +
augment (random-resized-lite crop, flip) + normalise + collate:

  * devgate's loader at 1, 2 and 4 workers (and inline, 0 workers);
  * where torch imports (--torch-python names the interpreter), a
    torch.utils.data.DataLoader doing the same per sample: PIL decode (what
    torchvision's ImageFolder uses), then the transforms written with torch ops
    (F.interpolate bilinear/area, random crop of a 1.125x resize, flip,
    normalise), since torchvision may not be installed (Debian ships
    python3-torch without it).

Usage: bench/loader_throughput.py [--build build] [--images 2000]
       [--size 32x32] [--batch 64] [--epochs 2] [--torch-python PYTHON]
Prints a table and one JSON line; nothing is written outside a temp folder.

With --synthetic CxHxW (e.g. 1x28x28, the mlp/lenet input) it measures the
fixture's own input path instead: milliseconds a batch of the synthetic
source at --batch (e.g. 4096) for each --workers count, once copied out by
dg_loader_next (the path before zero-copy slots) and once handed out as the
slot itself by dg_loader_acquire/dg_loader_release (the trainer's path), to
set beside the device step time.
"""
import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time

HELPER_C = r"""
#include "data/loader.h"
#include <jpeglib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

/* gen DIR N: N JPEGs (4 classes, sizes 64..127 x 48..111, quality 90). */
static int gen(const char *dir, int n)
{
    char path[4096];
    for (int i = 0; i < n; i++) {
        int k = i % 4, w = 64 + (i * 37) % 64, h = 48 + (i * 53) % 64;
        snprintf(path, sizeof path, "%s/c%d", dir, k);
        mkdir(path, 0755);
        snprintf(path, sizeof path, "%s/c%d/%05d.jpg", dir, k, i);
        FILE *f = fopen(path, "wb");
        if (!f)
            return 1;
        struct jpeg_compress_struct c;
        struct jpeg_error_mgr e;
        c.err = jpeg_std_error(&e);
        jpeg_create_compress(&c);
        jpeg_stdio_dest(&c, f);
        c.image_width = (JDIMENSION)w;
        c.image_height = (JDIMENSION)h;
        c.input_components = 3;
        c.in_color_space = JCS_RGB;
        jpeg_set_defaults(&c);
        jpeg_set_quality(&c, 90, TRUE);
        jpeg_start_compress(&c, TRUE);
        unsigned char *row = malloc((size_t)w * 3);
        for (int y = 0; y < h; y++) {
            for (int x = 0; x < w; x++) {
                int v = ((x / (4 + k)) + (y / (3 + k))) % 2 ? 200 : 50;
                row[3 * x] = (unsigned char)(v + (x * i) % 40);
                row[3 * x + 1] = (unsigned char)(255 - v);
                row[3 * x + 2] = (unsigned char)((x + y + 60 * k) % 256);
            }
            JSAMPROW r = row;
            jpeg_write_scanlines(&c, &r, 1);
        }
        jpeg_finish_compress(&c);
        jpeg_destroy_compress(&c);
        free(row);
        fclose(f);
    }
    return 0;
}

/* run DIR WORKERS BATCH H W EPOCHS: images/s over whole epochs. */
static int run(const char *dir, int workers, int batch, int h, int w, int epochs)
{
    dg_ctx *ctx = dg_ctx_new();
    char spec[4200];
    snprintf(spec, sizeof spec, "images:%s", dir);
    dg_source_opts so = {.channels = 3};
    dg_source *s = NULL;
    if (dg_source_open(ctx, spec, &so, &s) != DG_OK) {
        fprintf(stderr, "%s\n", dg_errmsg(ctx));
        return 1;
    }
    dg_loader_opts o = {.batch = batch, .channels = 3, .nres = 1, .crop = true, .flip = true,
                        .norm = DG_NORM_GIVEN, .norm_count = 3, .mean = {0.485f, 0.456f, 0.406f},
                        .std = {0.229f, 0.224f, 0.225f}, .workers = workers, .max_bad_share = -1, .seed = 1};
    o.res[0] = (dg_resolution){h, w, 1};
    dg_loader *ld = NULL;
    if (dg_loader_new(ctx, s, &o, &ld) != DG_OK) {
        fprintf(stderr, "%s\n", dg_errmsg(ctx));
        return 1;
    }
    float *x = malloc(dg_loader_batch_floats(ld) * sizeof(float));
    int32_t *y = malloc((size_t)batch * sizeof(int32_t));
    int steps = (int)(dg_loader_count(ld, DG_SPLIT_TRAIN) / (size_t)batch);
    dg_loader_start(ld, DG_SPLIT_TRAIN, 0, epochs, steps);
    double t0 = dg_now();
    for (int b = 0; b < epochs * steps; b++) {
        int hh, ww;
        if (dg_loader_next(ld, x, y, &hh, &ww) != DG_OK) {
            fprintf(stderr, "%s\n", dg_errmsg(ctx));
            return 1;
        }
    }
    double dt = dg_now() - t0;
    cJSON *st = dg_loader_stats_json(ld);
    char *js = cJSON_PrintUnformatted(cJSON_GetObjectItem(st, "stages"));
    printf("{\"images_per_s\": %.1f, \"images\": %d, \"seconds\": %.3f, \"stages\": %s}\n",
           (double)epochs * steps * batch / dt, epochs * steps * batch, dt, js);
    cJSON_free(js);
    cJSON_Delete(st);
    free(x);
    free(y);
    dg_loader_free(ld);
    dg_source_close(s);
    dg_ctx_free(ctx);
    return 0;
}

/* synth WORKERS BATCH C H W STEPS MODE: ms a batch of the fixture's synthetic
 * source (MODE next: copied out by dg_loader_next; acquire: handed out as the
 * slot itself, the trainer's path), and the stages. */
static int synth(int workers, int batch, int c, int h, int w, int steps, const char *mode)
{
    dg_ctx *ctx = dg_ctx_new();
    dg_source_opts so = {.channels = c, .seed = 1, .samples = 8192, .classes = 10, .height = h,
                         .width = w};
    dg_source *s = NULL;
    if (dg_source_open(ctx, "synthetic", &so, &s) != DG_OK) {
        fprintf(stderr, "%s\n", dg_errmsg(ctx));
        return 1;
    }
    dg_loader_opts o = {.batch = batch, .channels = c, .nres = 1, .workers = workers,
                        .max_bad_share = -1, .seed = 1};
    o.res[0] = (dg_resolution){h, w, 1};
    dg_loader *ld = NULL;
    if (dg_loader_new(ctx, s, &o, &ld) != DG_OK) {
        fprintf(stderr, "%s\n", dg_errmsg(ctx));
        return 1;
    }
    bool acq = strcmp(mode, "acquire") == 0;
    float *x = malloc(dg_loader_batch_floats(ld) * sizeof(float));
    int32_t *y = malloc((size_t)batch * sizeof(int32_t));
    dg_loader_start(ld, DG_SPLIT_TRAIN, 0, 1, steps + 2);
    double t0 = 0, c0 = 0, sum = 0;
    for (int b = 0; b < steps + 2; b++) {
        if (b == 2) {
            t0 = dg_now(); /* the first two batches fill the queue */
            c0 = (double)clock() / CLOCKS_PER_SEC;
        }
        int hh, ww;
        dg_batch v;
        dg_status st = acq ? dg_loader_acquire(ld, &v) : dg_loader_next(ld, x, y, &hh, &ww);
        if (st == DG_OK && acq) {
            sum += v.x[0] + (float)v.y[batch - 1]; /* the consumer reads the batch */
            st = dg_loader_release(ld, &v);
        }
        if (st != DG_OK) {
            fprintf(stderr, "%s\n", dg_errmsg(ctx));
            return 1;
        }
    }
    double dt = dg_now() - t0, dc = (double)clock() / CLOCKS_PER_SEC - c0;
    cJSON *st = dg_loader_stats_json(ld);
    char *js = cJSON_PrintUnformatted(cJSON_GetObjectItem(st, "stages"));
    printf("{\"ms_per_batch\": %.3f, \"cpu_ms_per_batch\": %.3f, \"batches\": %d, \"check\": %g, "
           "\"stages\": %s}\n",
           dt / steps * 1e3, dc / steps * 1e3, steps, sum, js);
    cJSON_free(js);
    cJSON_Delete(st);
    free(x);
    free(y);
    dg_loader_free(ld);
    dg_source_close(s);
    dg_ctx_free(ctx);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 9 && strcmp(argv[1], "synth") == 0)
        return synth(atoi(argv[2]), atoi(argv[3]), atoi(argv[4]), atoi(argv[5]), atoi(argv[6]),
                     atoi(argv[7]), argv[8]);
    if (argc == 4 && strcmp(argv[1], "gen") == 0)
        return gen(argv[2], atoi(argv[3]));
    if (argc == 8 && strcmp(argv[1], "run") == 0)
        return run(argv[2], atoi(argv[3]), atoi(argv[4]), atoi(argv[5]), atoi(argv[6]), atoi(argv[7]));
    fprintf(stderr, "usage: gen DIR N | run DIR WORKERS BATCH H W EPOCHS | "
                    "synth WORKERS BATCH C H W STEPS next|acquire\n");
    return 2;
}
"""

TORCH_PART = r"""
import json, os, sys, time
import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

root, h, w, batch, epochs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
workers_list = [int(x) for x in sys.argv[6].split(",")]
classes = sorted(os.listdir(root))
files = [(os.path.join(root, c, f), k) for k, c in enumerate(classes) for f in sorted(os.listdir(os.path.join(root, c)))]
mean = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)
std = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)

def resize(x, oh, ow):
    # bilinear (half-pixel) when growing, area when shrinking, as devgate does
    mode = "area" if oh <= x.shape[1] and ow <= x.shape[2] else "bilinear"
    kw = {} if mode == "area" else {"align_corners": False}
    return F.interpolate(x[None], size=(oh, ow), mode=mode, **kw)[0]

class DS(torch.utils.data.Dataset):
    def __len__(self):
        return len(files)
    def __getitem__(self, i):
        path, label = files[i]
        img = Image.open(path).convert("RGB")                      # read + decode
        x = torch.from_numpy(np.asarray(img)).permute(2, 0, 1).float().div_(255)
        x = resize(x, h, w)                                         # to the bucket size
        H, W = round(h * 1.125), round(w * 1.125)                   # random-resized-lite
        big = F.interpolate(x[None], size=(H, W), mode="bilinear", align_corners=False)[0]
        oy, ox = torch.randint(0, H - h + 1, (1,)).item(), torch.randint(0, W - w + 1, (1,)).item()
        x = big[:, oy:oy + h, ox:ox + w]
        if torch.rand(1).item() < 0.5:
            x = x.flip(2)
        return (x - mean) / std, label

def init(_):
    torch.set_num_threads(1)

torch.set_num_threads(1)
out = {"torch": torch.__version__}
for nw in workers_list:
    dl = torch.utils.data.DataLoader(DS(), batch_size=batch, shuffle=True, drop_last=True, num_workers=nw,
                                     worker_init_fn=init if nw else None, persistent_workers=nw > 0)
    n = 0
    t0 = time.perf_counter()
    for _ in range(epochs):
        for xb, yb in dl:
            n += xb.shape[0]
    out[str(nw)] = n / (time.perf_counter() - t0)
print(json.dumps(out))
"""


def link_flags(build):
    """The devgate executable's link line after its own objects (libraries)."""
    toks = shlex.split(open(os.path.join(build, "CMakeFiles", "devgate.dir", "link.txt")).read())
    i = toks.index("devgate") + 1  # after "-o devgate"
    out = []
    for t in toks[i:]:
        out.append(os.path.join(build, t) if t == "libdevgate.a" else t)
    return out


def synthetic(a, helper):
    """The fixture's input path: ms a batch, copied (next) against zero-copy (acquire)."""
    c, h, w = (int(v) for v in a.synthetic.split("x"))
    res = {"shape": a.synthetic, "batch": a.batch, "steps": a.steps, "cores": os.cpu_count(),
           "load": os.getloadavg()[0], "cells": {}}
    for nw in a.workers.split(","):
        for mode in ("next", "acquire"):
            p = subprocess.run([helper, "synth", nw, str(a.batch), str(c), str(h), str(w), str(a.steps), mode],
                               check=True, capture_output=True, text=True)
            res["cells"][f"{nw}/{mode}"] = json.loads(p.stdout)
    mb = a.batch * c * h * w * 4 / 1e6
    print(f"loader, synthetic {a.synthetic} batch {a.batch} ({mb:.1f} MB a batch), {a.steps} batches a cell, "
          f"{os.cpu_count()} cores, load average {res['load']:.1f}")
    print("  wall ms a batch (the consumer's view) and process CPU ms a batch (every thread: what making")
    print("  and handing over a batch costs, steadier than wall time on a shared host)")
    print(f"  {'workers':>8} {'next ms':>9} {'acquire ms':>11} {'next CPU':>9} {'acquire CPU':>12}")
    for nw in a.workers.split(","):
        n, q = res["cells"][f"{nw}/next"], res["cells"][f"{nw}/acquire"]
        print(f"  {nw:>8} {n['ms_per_batch']:9.3f} {q['ms_per_batch']:11.3f} {n['cpu_ms_per_batch']:9.3f} "
              f"{q['cpu_ms_per_batch']:12.3f}")
    print(json.dumps(res))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--images", type=int, default=2000)
    ap.add_argument("--size", default="32x32")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--workers", default="0,1,2,4")
    ap.add_argument("--torch-python", default=sys.executable)
    ap.add_argument("--synthetic", metavar="CxHxW", help="time the fixture's synthetic input path")
    ap.add_argument("--steps", type=int, default=20, help="timed batches a cell (--synthetic)")
    a = ap.parse_args()
    src = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    build = os.path.abspath(a.build if os.path.isabs(a.build) else os.path.join(src, a.build))
    h, w = (int(v) for v in a.size.split("x"))
    with tempfile.TemporaryDirectory() as tmp:
        helper = os.path.join(tmp, "loader_bench")
        cfile = os.path.join(tmp, "loader_bench.c")
        open(cfile, "w").write(HELPER_C)
        subprocess.run(["cc", "-O2", "-std=c17", "-D_GNU_SOURCE", "-I", os.path.join(src, "include"),
                        "-I", os.path.join(src, "src"), cfile, "-o", helper] + link_flags(build), check=True)
        if a.synthetic:
            return synthetic(a, helper)
        data = os.path.join(tmp, "jpegs")
        os.mkdir(data)
        subprocess.run([helper, "gen", data, str(a.images)], check=True)
        res = {"images": a.images, "size": a.size, "batch": a.batch, "epochs": a.epochs,
               "cores": os.cpu_count(), "devgate": {}, "torch": None}
        for nw in (int(x) for x in a.workers.split(",")):
            p = subprocess.run([helper, "run", data, str(nw), str(a.batch), str(h), str(w), str(a.epochs)],
                               check=True, capture_output=True, text=True)
            res["devgate"][str(nw)] = json.loads(p.stdout)
        p = subprocess.run([a.torch_python, "-c", TORCH_PART, data, str(h), str(w), str(a.batch), str(a.epochs),
                            a.workers], capture_output=True, text=True)
        if p.returncode == 0:
            res["torch"] = json.loads(p.stdout.strip().splitlines()[-1])
        else:
            res["torch_error"] = (p.stderr.strip().splitlines() or ["?"])[-1]
    print(f"loader throughput: {a.images} JPEGs (64..127 x 48..111) -> {a.size}, batch {a.batch}, "
          f"crop+flip+normalise, {a.epochs} epochs, {os.cpu_count()} cores")
    print(f"  {'workers':>8} {'devgate img/s':>14} {'torch img/s':>12}")
    for nw in a.workers.split(","):
        d = res["devgate"][nw]["images_per_s"]
        t = res["torch"].get(nw) if res["torch"] else None
        print(f"  {nw:>8} {d:14.0f} {'-' if t is None else str(round(t)):>12}")
    if res["torch"]:
        print(f"  torch {res['torch']['torch']}: DataLoader + PIL decode + transforms written with torch ops "
              "(torchvision not used)")
    else:
        print(f"  torch: not measured ({res.get('torch_error')})")
    print(json.dumps(res))


if __name__ == "__main__":
    main()
