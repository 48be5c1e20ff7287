/* The cpu backend's AVX-512 convolution kernels (cpu_avx512.c): the stride-1
 * direct convolution of one padded image and the weight gradient of one
 * image, the same arithmetic as cpu_ops.c's AVX2 kernels with 16-float
 * vectors. Built for x86-64 only (dg_cpu512_built); called only where the
 * CPU reports AVX-512 F (dg_cpu512_usable). */
#ifndef DG_CPU_AVX512_H
#define DG_CPU_AVX512_H

#include "backend/backend.h"

#include <stdbool.h>
#include <stddef.h>

/* Rows (taps) of a dw register block, and of a direct block's short form. */
#define DG_CPU512_MR 8
/* Rows (output channels) of a direct block's long form. */
#define DG_CPU512_MR_WIDE 12
/* Pixels (or dw output channels) of one vector. */
#define DG_CPU512_NR 16

/* True when this build holds the AVX-512 kernels (x86-64 with a compiler
 * that targets AVX-512). */
bool dg_cpu512_built(void);

/* True when the kernels are built and this CPU and OS run AVX-512 F. */
bool dg_cpu512_usable(void);

/* Rows of the direct block that starts with `left` output channels to go:
 * DG_CPU512_MR_WIDE or DG_CPU512_MR, whichever wastes fewer rows (32 =
 * 12 + 12 + 8, 64 = 4 x 12 + 8 + 8). Only the last block is ever padded. */
int dg_cpu512_block_rows(int left);

/* Rows m output channels take as direct blocks (dg_cpu512_block_rows),
 * padding included. */
size_t dg_cpu512_packed_rows(size_t m);

/* y [k, ho wo] (+ bias, when not NULL) = the stride-1 convolution of one
 * image already padded into buf [c, h + 2 pad, w + 2 pad] (DG_CPU512_NR
 * floats of slack after it); wp holds the weights as blocks of
 * dg_cpu512_block_rows rows each: block rb (its mb rows) at wp[rb kd + kk mb
 * + r], kd = c kh kw, rows past k zero. */
void dg_cpu512_conv_direct(const dg_conv_shape *s, const float *buf, const float *wp,
                           const float *bias, float *y);

/* part [round_up(c kh kw, DG_CPU512_MR), kp] += dw of one image turned over,
 * for the pixel rows [oy0, oy1): xpad the padded image (as above), dyt the
 * pixel-major dy [ho wo, kp] (kp a multiple of DG_CPU512_NR, columns past k
 * zero). */
void dg_cpu512_dw(const dg_conv_shape *s, const float *xpad, const float *dyt, size_t kp, int oy0,
                  int oy1, float *part);

#endif
