/* Executable header readers: ELF (32/64-bit, either endianness) and Mach-O
 * (thin 32/64-bit and universal/fat). They read only the headers, check every
 * offset against the buffer length, and reject truncated or hostile input with
 * a message; they never read out of bounds. */
#ifndef DG_BINFMT_H
#define DG_BINFMT_H

#include "devgate.h"

#define DG_BINFMT_MAX_SLICES 8

typedef struct dg_binfmt_info {
    char format[16]; /* "elf", "macho", "macho-fat" */
    int nslices;     /* 1 for thin binaries, slice count for fat ones (<= MAX) */
    char arch[DG_BINFMT_MAX_SLICES][16]; /* normalised: x86_64, aarch64, i386, arm, ppc64le,
                                            riscv64, s390x, ... "unknown(N)" */
    int bits;                            /* 32 or 64 (first slice) */
    bool little_endian;
} dg_binfmt_info;

/* Parses an ELF or Mach-O header from buf[0..len). DG_ERR_FORMAT with a reason
 * in err for anything that is not a well-formed header. */
dg_status dg_binfmt_parse(const unsigned char *buf, size_t len, dg_binfmt_info *out, char *err,
                          size_t errlen);
/* Reads the first bytes of path (enough for headers and fat tables) and parses
 * them. DG_ERR_IO when it cannot be read. */
dg_status dg_binfmt_file(const char *path, dg_binfmt_info *out, char *err, size_t errlen);
/* Normalises a kernel machine name (uname -m, e.g. "arm64", "amd64") to the
 * names above; returns a static string. */
const char *dg_arch_normalise(const char *machine);
/* True when the binary (any slice) runs natively on host_arch. */
bool dg_binfmt_matches(const dg_binfmt_info *info, const char *host_arch);
#endif
