/* libFuzzer harness for the PNG and JPEG decoders with 0, 1 and 3 channels:
 * any input gives DG_OK or DG_ERR_FORMAT with a reason, and a success is a
 * well-formed image with every value in [0, 1]. Inputs whose header claims
 * more than 4 Mpixel are skipped so the fuzzer spends its time on parsing,
 * not on decoding huge blank images. */
#include "data/data.h"
#include "fuzz.h"

#include <stdint.h>
#include <stdlib.h>

/* Width x height from a PNG IHDR or the first JPEG SOF marker; 0 if not found. */
static uint64_t claimed_pixels(const uint8_t *d, size_t n)
{
    if (n >= 24 && d[0] == 0x89 && d[1] == 'P')
        return ((uint64_t)d[16] << 24 | (uint64_t)d[17] << 16 | (uint64_t)d[18] << 8 | d[19]) *
               ((uint64_t)d[20] << 24 | (uint64_t)d[21] << 16 | (uint64_t)d[22] << 8 | d[23]);
    uint64_t most = 0;
    for (size_t i = 2; i + 8 < n; i++)
        if (d[i] == 0xFF && d[i + 1] >= 0xC0 && d[i + 1] <= 0xCF && d[i + 1] != 0xC4 &&
            d[i + 1] != 0xC8 && d[i + 1] != 0xCC) {
            uint64_t px =
                (uint64_t)(d[i + 5] << 8 | d[i + 6]) * (uint64_t)(d[i + 7] << 8 | d[i + 8]);
            most = px > most ? px : most;
        }
    return most;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (claimed_pixels(data, size) > (4u << 20))
        return 0;
    static const int chans[3] = {0, 1, 3};
    for (int k = 0; k < 3; k++) {
        dg_image img;
        char err[256];
        dg_status st = dg_decode_image(data, size, chans[k], &img, err, sizeof err);
        if (st != DG_OK && ((st != DG_ERR_FORMAT && st != DG_ERR_NOMEM) || !err[0]))
            abort();
        if (st != DG_OK) {
            if (img.data)
                abort();
            continue;
        }
        if (img.h < 1 || img.w < 1 || img.h > 16384 || img.w > 16384 || !img.data)
            abort();
        if (chans[k] ? img.c != chans[k] : (img.c != 1 && img.c != 3))
            abort();
        size_t n = (size_t)img.c * img.h * img.w;
        for (size_t i = 0; i < n; i++)
            if (!(img.data[i] >= 0.0f && img.data[i] <= 1.0f))
                abort();
        dg_image_free(&img);
    }
    return 0;
}
