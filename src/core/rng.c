/* Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3").
 * The key is the seed; the counter is (stream, index), so any element of any
 * stream can be produced independently and identically everywhere. */
#include "core.h"

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

static void philox_round(uint32_t ctr[4], const uint32_t key[2])
{
    uint64_t p0 = (uint64_t)PHILOX_M0 * ctr[0];
    uint64_t p1 = (uint64_t)PHILOX_M1 * ctr[2];
    uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
    uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
    ctr[0] = hi1 ^ ctr[1] ^ key[0];
    ctr[1] = lo1;
    ctr[2] = hi0 ^ ctr[3] ^ key[1];
    ctr[3] = lo0;
}

static void philox4x32_10(const uint32_t in[4], const uint32_t key_in[2], uint32_t out[4])
{
    uint32_t ctr[4] = {in[0], in[1], in[2], in[3]};
    uint32_t key[2] = {key_in[0], key_in[1]};
    for (int r = 0; r < 10; r++) {
        philox_round(ctr, key);
        key[0] += PHILOX_W0;
        key[1] += PHILOX_W1;
    }
    for (int i = 0; i < 4; i++)
        out[i] = ctr[i];
}

void dg_rng_init(dg_rng *r, uint64_t seed, uint64_t stream)
{
    r->seed = seed;
    r->stream = stream;
    r->counter = 0;
}

void dg_rng_next4(dg_rng *r, uint32_t out[4])
{
    uint32_t ctr[4] = {(uint32_t)r->counter, (uint32_t)(r->counter >> 32), (uint32_t)r->stream,
                       (uint32_t)(r->stream >> 32)};
    uint32_t key[2] = {(uint32_t)r->seed, (uint32_t)(r->seed >> 32)};
    philox4x32_10(ctr, key, out);
    r->counter++;
}
void dg_rng_uniform(dg_rng *r, float *dst, size_t n, float lo, float hi)
{
    uint32_t buf[4];
    for (size_t i = 0; i < n; i++) {
        if ((i & 3) == 0)
            dg_rng_next4(r, buf);
        /* 24 random bits give every float in [0,1) on a uniform grid. */
        float u = (float)(buf[i & 3] >> 8) * (1.0f / 16777216.0f);
        dst[i] = lo + (hi - lo) * u;
    }
}
