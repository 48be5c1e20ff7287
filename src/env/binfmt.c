/* ELF and Mach-O header readers. Every multi-byte read goes through rd16/rd32/
 * rd64 after an explicit length check, so hostile input can only produce an
 * error message, never an out-of-bounds read. */
#include "binfmt.h"

#include "core/core.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

/* Headers and fat tables are tiny (ELF 64 bytes, Mach-O 32, a fat table of
 * DG_BINFMT_MAX_SLICES entries at most 264), so a small read is enough and keeps
 * a scan of thousands of extension modules cheap. */
#define READ_MAX 4096

/* A 0xCAFEBABE header with more "slices" than this is a Java class file (its
 * version word lands where nfat_arch would be, and is >= 45) or other data. */
#define FAT_PLAUSIBLE_MAX 30

#define ELF_EHDR32 52
#define ELF_EHDR64 64
#define MACHO_HDR32 28
#define MACHO_HDR64 32
#define FAT_HDR 8
#define FAT_ARCH32 20
#define FAT_ARCH64 32

#define CPU_ARCH_ABI64 0x01000000u
#define CPU_ARCH_ABI64_32 0x02000000u

static uint16_t rd16(const unsigned char *p, bool le)
{
    return le ? (uint16_t)(p[0] | p[1] << 8) : (uint16_t)(p[0] << 8 | p[1]);
}

static uint32_t rd32(const unsigned char *p, bool le)
{
    if (le)
        return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

static uint64_t rd64(const unsigned char *p, bool le)
{
    uint64_t a = rd32(p, le), b = rd32(p + 4, le);
    return le ? (b << 32 | a) : (a << 32 | b);
}

static void set_arch(char dst[16], const char *name)
{
    snprintf(dst, 16, "%s", name);
}

static void set_unknown(char dst[16], uint32_t code)
{
    char tmp[32];
    snprintf(tmp, sizeof tmp, "unknown(%u)", (unsigned)code);
    /* A code too long for the field would be cut mid-number and look like a
     * different code; say plainly that it is unknown instead. */
    set_arch(dst, strlen(tmp) < 16 ? tmp : "unknown");
}

/* ---- ELF ------------------------------------------------------------------ */

static void elf_arch(char dst[16], uint16_t m, bool is64, bool le)
{
    const char *name = NULL;
    switch (m) {
    case 3: name = "i386"; break;    /* EM_386 */
    case 6: name = "i386"; break;    /* EM_IAMCU */
    case 62: name = "x86_64"; break; /* EM_X86_64 (also x32) */
    case 183: name = le ? "aarch64" : "aarch64_be"; break;
    case 40: name = "arm"; break;                /* EM_ARM, either endianness */
    case 20: name = le ? "ppcle" : "ppc"; break; /* EM_PPC */
    case 21: name = le ? "ppc64le" : "ppc64"; break;
    case 243: name = is64 ? "riscv64" : "riscv32"; break;
    case 22: name = is64 ? "s390x" : "s390"; break;
    case 258: name = is64 ? "loongarch64" : "loongarch32"; break;
    case 8: /* EM_MIPS */
        if (is64)
            name = le ? "mips64el" : "mips64";
        else
            name = le ? "mipsel" : "mips";
        break;
    case 10: name = "mipsel"; break; /* EM_MIPS_RS3_LE */
    case 2: name = "sparc"; break;
    case 18: name = "sparc"; break;   /* EM_SPARC32PLUS */
    case 43: name = "sparc64"; break; /* EM_SPARCV9 */
    case 50: name = "ia64"; break;
    case 15: name = "hppa"; break; /* EM_PARISC */
    case 42: name = "sh"; break;
    case 4: name = "m68k"; break;
    case 0x9026: name = "alpha"; break;
    }
    if (name)
        set_arch(dst, name);
    else
        set_unknown(dst, m);
}

static dg_status parse_elf(const unsigned char *b, size_t len, dg_binfmt_info *out, char *err,
                           size_t errlen)
{
    if (len < 16)
        return dg_fail_buf(err, errlen, DG_ERR_FORMAT,
                           "truncated ELF identification: %zu of 16 bytes", len);
    int cls = b[4], data = b[5];
    if (cls != 1 && cls != 2)
        return dg_fail_buf(err, errlen, DG_ERR_FORMAT,
                           "ELF class %d is neither 32-bit (1) nor 64-bit (2)", cls);
    if (data != 1 && data != 2)
        return dg_fail_buf(err, errlen, DG_ERR_FORMAT,
                           "ELF data encoding %d is neither little (1) nor big endian (2)", data);
    if (b[6] != 1)
        return dg_fail_buf(err, errlen, DG_ERR_FORMAT, "ELF identification version %d is not 1",
                           b[6]);
    bool is64 = cls == 2, le = data == 1;
    size_t need = is64 ? ELF_EHDR64 : ELF_EHDR32;
    if (len < need)
        return dg_fail_buf(err, errlen, DG_ERR_FORMAT, "truncated ELF%d header: %zu of %zu bytes",
                           is64 ? 64 : 32, len, need);
    uint32_t version = rd32(b + 20, le);
    if (version != 1)
        return dg_fail_buf(err, errlen, DG_ERR_FORMAT, "ELF header version %u is not 1",
                           (unsigned)version);
    set_arch(out->format, "elf");
    out->nslices = 1;
    out->bits = is64 ? 64 : 32;
    out->little_endian = le;
    elf_arch(out->arch[0], rd16(b + 18, le), is64, le);
    return DG_OK;
}

/* ---- Mach-O ---------------------------------------------------------------- */

static void macho_arch(char dst[16], uint32_t cputype)
{
    const char *name = NULL;
    switch (cputype) {
    case 7: name = "i386"; break;
    case 7 | CPU_ARCH_ABI64: name = "x86_64"; break;
    case 12: name = "arm"; break;
    case 12 | CPU_ARCH_ABI64: name = "aarch64"; break; /* arm64 and arm64e */
    case 12 | CPU_ARCH_ABI64_32: name = "arm64_32"; break;
    case 18: name = "ppc"; break;
    case 18 | CPU_ARCH_ABI64: name = "ppc64"; break;
    case 6: name = "m68k"; break;
    case 14: name = "sparc"; break;
    case 11: name = "hppa"; break;
    }
    if (name)
        set_arch(dst, name);
    else
        set_unknown(dst, cputype);
}

/* Bit width and byte order of code for a Mach-O cputype: only PowerPC and the
 * older RISC ports were big endian. */
static int macho_bits(uint32_t cputype)
{
    return (cputype & CPU_ARCH_ABI64) ? 64 : 32;
}

static bool macho_le(uint32_t cputype)
{
    uint32_t base = cputype & 0x00ffffffu;
    return !(base == 18 || base == 6 || base == 14 || base == 11);
}

static dg_status parse_thin(const unsigned char *b, size_t len, bool is64, bool le,
                            dg_binfmt_info *out, char *err, size_t errlen)
{
    size_t need = is64 ? MACHO_HDR64 : MACHO_HDR32;
    if (len < need)
        return dg_fail_buf(err, errlen, DG_ERR_FORMAT,
                           "truncated Mach-O%s header: %zu of %zu bytes", is64 ? " 64-bit" : "",
                           len, need);
    uint32_t cputype = rd32(b + 4, le);
    set_arch(out->format, "macho");
    out->nslices = 1;
    out->bits = is64 ? 64 : 32;
    out->little_endian = le;
    macho_arch(out->arch[0], cputype);
    return DG_OK;
}

static dg_status parse_fat(const unsigned char *b, size_t len, bool is64, dg_binfmt_info *out,
                           char *err, size_t errlen)
{
    if (len < FAT_HDR)
        return dg_fail_buf(err, errlen, DG_ERR_FORMAT,
                           "truncated universal header: %zu of %d bytes", len, FAT_HDR);
    uint32_t n = rd32(b + 4, false);
    if (n == 0)
        return dg_fail_buf(err, errlen, DG_ERR_FORMAT, "universal binary with no slices");
    if (n > FAT_PLAUSIBLE_MAX)
        return dg_fail_buf(
            err, errlen, DG_ERR_FORMAT,
            "0xCAFEBABE data with %u slices is not Mach-O (likely a Java class file)", (unsigned)n);
    if (n > DG_BINFMT_MAX_SLICES)
        return dg_fail_buf(err, errlen, DG_ERR_FORMAT,
                           "universal binary with %u slices exceeds the limit of %d", (unsigned)n,
                           DG_BINFMT_MAX_SLICES);
    size_t ent = is64 ? FAT_ARCH64 : FAT_ARCH32;
    size_t table_end = FAT_HDR + (size_t)n * ent;
    if (len < table_end)
        return dg_fail_buf(err, errlen, DG_ERR_FORMAT,
                           "universal arch table runs past the end: %zu of %zu bytes", len,
                           table_end);
    for (uint32_t i = 0; i < n; i++) {
        const unsigned char *e = b + FAT_HDR + (size_t)i * ent;
        uint32_t cputype = rd32(e, false);
        uint64_t off = is64 ? rd64(e + 8, false) : rd32(e + 8, false);
        uint64_t size = is64 ? rd64(e + 16, false) : rd32(e + 12, false);
        /* A slice must lie after the table and have a size; one that overlaps
         * the header or wraps around is a forged table, not a binary. */
        if (off < table_end)
            return dg_fail_buf(err, errlen, DG_ERR_FORMAT,
                               "slice %u offset %llu overlaps the universal header", (unsigned)i,
                               (unsigned long long)off);
        if (size == 0)
            return dg_fail_buf(err, errlen, DG_ERR_FORMAT, "slice %u is empty", (unsigned)i);
        if (off > UINT64_MAX - size)
            return dg_fail_buf(err, errlen, DG_ERR_FORMAT, "slice %u offset plus size overflows",
                               (unsigned)i);
        macho_arch(out->arch[i], cputype);
        if (i == 0) {
            out->bits = macho_bits(cputype);
            out->little_endian = macho_le(cputype);
        }
    }
    set_arch(out->format, "macho-fat");
    out->nslices = (int)n;
    return DG_OK;
}

dg_status dg_binfmt_parse(const unsigned char *buf, size_t len, dg_binfmt_info *out, char *err,
                          size_t errlen)
{
    dg_binfmt_info tmp;
    memset(&tmp, 0, sizeof tmp);
    if (err && errlen)
        err[0] = '\0';
    if (!buf && len)
        return dg_fail_buf(err, errlen, DG_ERR_FORMAT, "no buffer");
    if (len == 0)
        return dg_fail_buf(err, errlen, DG_ERR_FORMAT, "empty input");
    if (len < 4)
        return dg_fail_buf(err, errlen, DG_ERR_FORMAT,
                           "truncated: %zu bytes is too short for any header", len);

    dg_status st;
    uint32_t be = rd32(buf, false);
    if (buf[0] == 0x7f && buf[1] == 'E' && buf[2] == 'L' && buf[3] == 'F')
        st = parse_elf(buf, len, &tmp, err, errlen);
    else if (be == 0xfeedfaceu || be == 0xcefaedfeu)
        st = parse_thin(buf, len, false, be == 0xcefaedfeu, &tmp, err, errlen);
    else if (be == 0xfeedfacfu || be == 0xcffaedfeu)
        st = parse_thin(buf, len, true, be == 0xcffaedfeu, &tmp, err, errlen);
    else if (be == 0xcafebabeu)
        st = parse_fat(buf, len, false, &tmp, err, errlen);
    else if (be == 0xcafebabfu)
        st = parse_fat(buf, len, true, &tmp, err, errlen);
    else
        st = dg_fail_buf(err, errlen, DG_ERR_FORMAT, "not ELF or Mach-O: magic %02x %02x %02x %02x",
                         buf[0], buf[1], buf[2], buf[3]);
    /* out is written only on success so callers never see half a parse. */
    if (st == DG_OK && out)
        *out = tmp;
    return st;
}

dg_status dg_binfmt_file(const char *path, dg_binfmt_info *out, char *err, size_t errlen)
{
    if (err && errlen)
        err[0] = '\0';
    if (!path) {
        if (err && errlen)
            snprintf(err, errlen, "no path");
        return DG_ERR_IO;
    }
    /* O_NONBLOCK: a FIFO planted where a binary should be must not hang us;
     * the S_ISREG check below then refuses it. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) {
        if (err && errlen)
            snprintf(err, errlen, "cannot open: %s", strerror(errno));
        return DG_ERR_IO;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        if (err && errlen)
            snprintf(err, errlen, "cannot stat: %s", strerror(e));
        return DG_ERR_IO;
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        if (err && errlen)
            snprintf(err, errlen, "%s",
                     S_ISDIR(sb.st_mode) ? "is a directory" : "not a regular file");
        return DG_ERR_IO;
    }
    unsigned char buf[READ_MAX];
    size_t n = 0;
    while (n < sizeof buf) {
        ssize_t got = read(fd, buf + n, sizeof buf - n);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            int e = errno;
            close(fd);
            if (err && errlen)
                snprintf(err, errlen, "cannot read: %s", strerror(e));
            return DG_ERR_IO;
        }
        if (got == 0)
            break;
        n += (size_t)got;
    }
    close(fd);
    return dg_binfmt_parse(buf, n, out, err, errlen);
}

const char *dg_arch_normalise(const char *m)
{
    static const struct {
        const char *in, *out;
    } map[] = {
        {"x86_64", "x86_64"},
        {"amd64", "x86_64"},
        {"x64", "x86_64"},
        {"x86-64", "x86_64"},
        {"i386", "i386"},
        {"i486", "i386"},
        {"i586", "i386"},
        {"i686", "i386"},
        {"x86", "i386"},
        {"i86pc", "i386"},
        {"aarch64", "aarch64"},
        {"arm64", "aarch64"},
        {"arm64e", "aarch64"},
        {"aarch64_be", "aarch64_be"},
        {"arm64_32", "arm64_32"},
        {"arm", "arm"},
        {"armhf", "arm"},
        {"armel", "arm"},
        {"ppc64le", "ppc64le"},
        {"powerpc64le", "ppc64le"},
        {"ppc64el", "ppc64le"},
        {"ppc64", "ppc64"},
        {"powerpc64", "ppc64"},
        {"ppc", "ppc"},
        {"powerpc", "ppc"},
        {"ppcle", "ppcle"},
        {"riscv64", "riscv64"},
        {"riscv32", "riscv32"},
        {"s390x", "s390x"},
        {"s390", "s390"},
        {"loongarch64", "loongarch64"},
        {"loong64", "loongarch64"},
        {"loongarch32", "loongarch32"},
        {"mips64el", "mips64el"},
        {"mips64", "mips64"},
        {"mipsel", "mipsel"},
        {"mips", "mips"},
        {"sparc64", "sparc64"},
        {"sparc", "sparc"},
        {"ia64", "ia64"},
        {"parisc", "hppa"},
        {"parisc64", "hppa"},
        {"hppa", "hppa"},
        {"alpha", "alpha"},
        {"m68k", "m68k"},
        {"sh", "sh"},
    };
    if (!m || !*m)
        return "unknown";
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (strcasecmp(m, map[i].in) == 0)
            return map[i].out;
    /* Families the kernel reports with a variant suffix: armv7l, armv6l,
     * armv8l (32-bit userland on a 64-bit ARM kernel), sh4, sh4a. */
    if (strncasecmp(m, "armv", 4) == 0)
        return "arm";
    if ((m[0] == 's' || m[0] == 'S') && (m[1] == 'h' || m[1] == 'H') && m[2] >= '0' && m[2] <= '9')
        return "sh";
    return "unknown";
}

bool dg_binfmt_matches(const dg_binfmt_info *info, const char *host_arch)
{
    if (!info || !host_arch)
        return false;
    const char *norm = dg_arch_normalise(host_arch);
    int n = info->nslices < DG_BINFMT_MAX_SLICES ? info->nslices : DG_BINFMT_MAX_SLICES;
    for (int i = 0; i < n; i++) {
        /* Two unknown architectures are not known to be the same one. */
        if (strncmp(info->arch[i], "unknown", 7) == 0)
            continue;
        if (strcmp(info->arch[i], host_arch) == 0 ||
            (strcmp(norm, "unknown") != 0 && strcmp(info->arch[i], norm) == 0))
            return true;
    }
    return false;
}
