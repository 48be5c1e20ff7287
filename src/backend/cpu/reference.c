/* The plain reference path: no BLAS, no threads, double accumulation. This file
 * must never be compiled with fast-math; drift is measured against it. */
#include "backend/backend.h"

/* c[m,n] = a[m,k] * b[k,n] in double, row-major. */
void dg_gemm_reference(int m, int n, int k, const float *a, const float *b, double *c)
{
    for (int i = 0; i < m; i++) {
        double *crow = c + (size_t)i * n;
        for (int j = 0; j < n; j++)
            crow[j] = 0.0;
        for (int p = 0; p < k; p++) {
            double av = a[(size_t)i * k + p];
            const float *brow = b + (size_t)p * n;
            for (int j = 0; j < n; j++)
                crow[j] += av * brow[j];
        }
    }
}
