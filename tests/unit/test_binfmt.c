/* Executable header readers and the Python interpreter probe. Fixtures are
 * built in memory (and written to a private temp dir for the file API), so the
 * test needs no binaries of foreign architectures. Truncated inputs are copied
 * into exactly-sized heap blocks so a sanitizer build catches any over-read. */
#include "check.h"

#include "env/binfmt.h"
#include "env/env.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

/* ---- fixture builders ------------------------------------------------------ */

static void w16(unsigned char *p, uint16_t v, bool le)
{
    p[le ? 0 : 1] = (unsigned char)v;
    p[le ? 1 : 0] = (unsigned char)(v >> 8);
}

static void w32(unsigned char *p, uint32_t v, bool le)
{
    for (int i = 0; i < 4; i++)
        p[le ? i : 3 - i] = (unsigned char)(v >> (8 * i));
}

static void w64(unsigned char *p, uint64_t v, bool le)
{
    w32(p + (le ? 0 : 4), (uint32_t)v, le);
    w32(p + (le ? 4 : 0), (uint32_t)(v >> 32), le);
}

/* ELF header of a shared object; returns its length. */
static size_t make_elf(unsigned char *b, bool is64, bool le, uint16_t machine)
{
    size_t n = is64 ? 64 : 52;
    memset(b, 0, n);
    memcpy(b,
           "\x7f"
           "ELF",
           4);
    b[4] = is64 ? 2 : 1;
    b[5] = le ? 1 : 2;
    b[6] = 1;
    w16(b + 16, 3, le); /* ET_DYN */
    w16(b + 18, machine, le);
    w32(b + 20, 1, le);
    w16(b + (is64 ? 52 : 40), (uint16_t)n, le); /* e_ehsize */
    return n;
}

static size_t make_macho(unsigned char *b, bool is64, bool le, uint32_t cputype)
{
    size_t n = is64 ? 32 : 28;
    memset(b, 0, n);
    w32(b, is64 ? 0xfeedfacfu : 0xfeedfaceu, le);
    w32(b + 4, cputype, le);
    w32(b + 12, 6, le); /* MH_DYLIB */
    return n;
}

/* Universal header with its arch table (slices placed after a 16 KiB gap, as
 * lipo aligns them); returns the header length. */
static size_t make_fat(unsigned char *b, bool is64, uint32_t n, const uint32_t *cpus)
{
    size_t ent = is64 ? 32 : 20;
    memset(b, 0, 8 + n * ent);
    w32(b, is64 ? 0xcafebabfu : 0xcafebabeu, false);
    w32(b + 4, n, false);
    for (uint32_t i = 0; i < n; i++) {
        unsigned char *e = b + 8 + i * ent;
        uint64_t off = 0x4000u * (i + 1);
        w32(e, cpus[i], false);
        w32(e + 4, 3, false);
        if (is64) {
            w64(e + 8, off, false);
            w64(e + 16, 0x1000, false);
            w32(e + 24, 14, false);
        } else {
            w32(e + 8, (uint32_t)off, false);
            w32(e + 12, 0x1000, false);
            w32(e + 16, 14, false);
        }
    }
    return 8 + n * ent;
}

#define CPU_X86_64 0x01000007u
#define CPU_ARM64 0x0100000cu

static dg_status parse_exact(const unsigned char *src, size_t len, dg_binfmt_info *info, char *err,
                             size_t errlen)
{
    /* malloc(0) may return NULL; the parser must cope with len 0 either way. */
    unsigned char *copy = malloc(len ? len : 1);
    if (len)
        memcpy(copy, src, len);
    dg_status st = dg_binfmt_parse(copy, len, info, err, errlen);
    free(copy);
    return st;
}

static void check_one(const unsigned char *b, size_t len, const char *format, const char *arch,
                      int bits, bool le)
{
    dg_binfmt_info info;
    char err[256];
    dg_status st = parse_exact(b, len, &info, err, sizeof err);
    CHECK_MSG(st == DG_OK, "%s/%s: %s", format, arch, err);
    if (st != DG_OK)
        return;
    CHECK_STR(info.format, format);
    CHECK(info.nslices == 1);
    CHECK_STR(info.arch[0], arch);
    CHECK_MSG(info.bits == bits, "%s bits %d", arch, info.bits);
    CHECK_MSG(info.little_endian == le, "%s endianness", arch);
}

/* Every proper prefix of a header must be refused with a reason, and must not
 * touch the output. */
static void check_truncations(const unsigned char *b, size_t full, const char *what)
{
    int bad = 0;
    for (size_t len = 0; len < full; len++) {
        dg_binfmt_info info;
        memset(&info, 0x5a, sizeof info);
        char err[256] = "";
        dg_status st = parse_exact(b, len, &info, err, sizeof err);
        unsigned char sentinel[sizeof info];
        memset(sentinel, 0x5a, sizeof sentinel);
        if (st != DG_ERR_FORMAT || !err[0] || memcmp(&info, sentinel, sizeof info) != 0) {
            fprintf(stderr, "%s truncated to %zu: status %s, err \"%s\"\n", what, len,
                    dg_status_name(st), err);
            bad++;
        }
    }
    CHECK_MSG(bad == 0, "%s: %d bad truncations", what, bad);
}

static void expect_format(const unsigned char *b, size_t len, const char *needle, const char *what)
{
    dg_binfmt_info info;
    char err[256] = "";
    dg_status st = parse_exact(b, len, &info, err, sizeof err);
    CHECK_MSG(st == DG_ERR_FORMAT, "%s: status %s", what, dg_status_name(st));
    CHECK_MSG(strstr(err, needle) != NULL, "%s: reason \"%s\" lacks \"%s\"", what, err, needle);
}

/* ---- header tests ------------------------------------------------------------ */

static void test_elf(void)
{
    unsigned char b[64];
    size_t n;
    n = make_elf(b, true, true, 62);
    check_one(b, n, "elf", "x86_64", 64, true);
    check_truncations(b, n, "elf64 x86_64");
    n = make_elf(b, true, true, 183);
    check_one(b, n, "elf", "aarch64", 64, true);
    check_truncations(b, n, "elf64 aarch64");
    n = make_elf(b, false, true, 40);
    check_one(b, n, "elf", "arm", 32, true);
    check_truncations(b, n, "elf32 arm");
    n = make_elf(b, true, false, 22);
    check_one(b, n, "elf", "s390x", 64, false);
    check_truncations(b, n, "elf64 s390x");
    n = make_elf(b, false, true, 3);
    check_one(b, n, "elf", "i386", 32, true);
    n = make_elf(b, true, true, 21);
    check_one(b, n, "elf", "ppc64le", 64, true);
    n = make_elf(b, true, false, 21);
    check_one(b, n, "elf", "ppc64", 64, false);
    n = make_elf(b, true, true, 243);
    check_one(b, n, "elf", "riscv64", 64, true);
    n = make_elf(b, true, true, 258);
    check_one(b, n, "elf", "loongarch64", 64, true);
    n = make_elf(b, false, false, 8);
    check_one(b, n, "elf", "mips", 32, false);
    n = make_elf(b, true, true, 8);
    check_one(b, n, "elf", "mips64el", 64, true);
    n = make_elf(b, true, true, 9999);
    check_one(b, n, "elf", "unknown(9999)", 64, true);

    /* Trailing bytes beyond the header are fine. */
    unsigned char big[200];
    memset(big, 0xee, sizeof big);
    make_elf(big, true, true, 62);
    check_one(big, sizeof big, "elf", "x86_64", 64, true);

    n = make_elf(b, true, true, 62);
    b[4] = 3;
    expect_format(b, n, "class", "elf bad class");
    b[4] = 2;
    b[5] = 0;
    expect_format(b, n, "encoding", "elf bad data");
    b[5] = 1;
    b[6] = 9;
    expect_format(b, n, "version", "elf bad ident version");
    b[6] = 1;
    w32(b + 20, 7, true);
    expect_format(b, n, "version", "elf bad header version");
}

static void test_macho(void)
{
    unsigned char b[64];
    size_t n;
    n = make_macho(b, true, true, CPU_X86_64);
    check_one(b, n, "macho", "x86_64", 64, true);
    check_truncations(b, n, "macho x86_64");
    n = make_macho(b, true, true, CPU_ARM64);
    check_one(b, n, "macho", "aarch64", 64, true);
    check_truncations(b, n, "macho arm64");
    n = make_macho(b, false, true, 7);
    check_one(b, n, "macho", "i386", 32, true);
    check_truncations(b, n, "macho i386");
    n = make_macho(b, false, false, 18);
    check_one(b, n, "macho", "ppc", 32, false);
    n = make_macho(b, false, true, 0x0200000cu);
    check_one(b, n, "macho", "arm64_32", 32, true);
    n = make_macho(b, true, true, 0x7fffffffu);
    check_one(b, n, "macho", "unknown", 64, true);
}

static void check_fat(bool is64)
{
    const char *what = is64 ? "fat64" : "fat";
    unsigned char b[512];
    uint32_t cpus[] = {CPU_X86_64, CPU_ARM64};
    size_t n = make_fat(b, is64, 2, cpus);
    dg_binfmt_info info;
    char err[256];
    dg_status st = parse_exact(b, n, &info, err, sizeof err);
    CHECK_MSG(st == DG_OK, "%s: %s", what, err);
    if (st == DG_OK) {
        CHECK_STR(info.format, "macho-fat");
        CHECK(info.nslices == 2);
        CHECK_STR(info.arch[0], "x86_64");
        CHECK_STR(info.arch[1], "aarch64");
        CHECK(info.bits == 64);
        CHECK(info.little_endian);
        CHECK(dg_binfmt_matches(&info, "x86_64"));
        CHECK(dg_binfmt_matches(&info, "aarch64"));
        CHECK(dg_binfmt_matches(&info, "arm64"));
        CHECK(dg_binfmt_matches(&info, "amd64"));
        CHECK(!dg_binfmt_matches(&info, "riscv64"));
        CHECK(!dg_binfmt_matches(&info, "i386"));
    }
    check_truncations(b, n, what);

    /* The table claims three slices; the buffer holds two. */
    w32(b + 4, 3, false);
    expect_format(b, n, "past the end", is64 ? "fat64 table past end" : "fat table past end");
    w32(b + 4, 0xffffffffu, false);
    expect_format(b, n, "not Mach-O", "fat huge count");
    w32(b + 4, 31, false);
    expect_format(b, n, "not Mach-O", "fat 31 slices");
    w32(b + 4, DG_BINFMT_MAX_SLICES + 1, false);
    expect_format(b, sizeof b, "limit", "fat over the slice limit");
    w32(b + 4, 0, false);
    expect_format(b, n, "no slices", "fat empty");

    /* A slice that starts inside the header is a forged table. */
    n = make_fat(b, is64, 2, cpus);
    if (is64)
        w64(b + 8 + 8, 4, false);
    else
        w32(b + 8 + 8, 4, false);
    expect_format(b, n, "overlaps", "fat slice offset in header");
    n = make_fat(b, is64, 2, cpus);
    if (is64)
        w64(b + 8 + 32 + 16, 0, false);
    else
        w32(b + 8 + 20 + 12, 0, false);
    expect_format(b, n, "empty", "fat empty slice");
    if (is64) {
        n = make_fat(b, is64, 1, cpus);
        w64(b + 8 + 8, UINT64_MAX - 8, false);
        expect_format(b, n, "overflow", "fat64 offset overflow");
    }

    /* The full limit of slices is accepted. */
    uint32_t many[DG_BINFMT_MAX_SLICES];
    for (int i = 0; i < DG_BINFMT_MAX_SLICES; i++)
        many[i] = i % 2 ? CPU_ARM64 : 18;
    n = make_fat(b, is64, DG_BINFMT_MAX_SLICES, many);
    st = parse_exact(b, n, &info, err, sizeof err);
    CHECK_MSG(st == DG_OK && info.nslices == DG_BINFMT_MAX_SLICES, "%s max slices: %s", what, err);
    if (st == DG_OK) {
        CHECK_STR(info.arch[0], "ppc");
        CHECK(!info.little_endian);
        CHECK(info.bits == 32);
    }
}

static void test_other(void)
{
    /* A Java class file: 0xCAFEBABE, minor 0, major 52. */
    const unsigned char java[] = {0xca, 0xfe, 0xba, 0xbe, 0x00, 0x00, 0x00, 0x34,
                                  0x00, 0x10, 0x0a, 0x00, 0x03, 0x00, 0x0d, 0x07};
    expect_format(java, sizeof java, "Java", "java class");
    const char *text = "#!/bin/sh\necho hello\n";
    expect_format((const unsigned char *)text, strlen(text), "not ELF or Mach-O", "text");
    expect_format((const unsigned char *)"", 0, "empty", "empty");
    expect_format((const unsigned char *)"\x7f"
                                         "EL",
                  3, "truncated", "3 bytes");

    dg_binfmt_info info;
    char err[64];
    CHECK(dg_binfmt_parse(NULL, 0, &info, err, sizeof err) == DG_ERR_FORMAT);
    /* A tiny error buffer is filled, not overrun. */
    char tiny[4];
    CHECK(dg_binfmt_parse((const unsigned char *)"abcdef", 6, &info, tiny, sizeof tiny) ==
          DG_ERR_FORMAT);
    CHECK(strlen(tiny) == 3);
    CHECK(dg_binfmt_parse((const unsigned char *)"abcdef", 6, &info, NULL, 0) == DG_ERR_FORMAT);

    CHECK(!dg_binfmt_matches(NULL, "x86_64"));
    unsigned char b[64];
    size_t n = make_elf(b, true, true, 9999);
    dg_binfmt_parse(b, n, &info, err, sizeof err);
    CHECK(!dg_binfmt_matches(&info, "unknown(9999)"));
    CHECK(!dg_binfmt_matches(&info, NULL));
}

static void test_normalise(void)
{
    static const char *pairs[][2] = {
        {"x86_64", "x86_64"},   {"amd64", "x86_64"},     {"AMD64", "x86_64"},
        {"aarch64", "aarch64"}, {"arm64", "aarch64"},    {"armv7l", "arm"},
        {"armv6l", "arm"},      {"armv8l", "arm"},       {"i686", "i386"},
        {"i386", "i386"},       {"ppc64le", "ppc64le"},  {"ppc64", "ppc64"},
        {"riscv64", "riscv64"}, {"s390x", "s390x"},      {"loongarch64", "loongarch64"},
        {"mips64", "mips64"},   {"sparc64", "sparc64"},  {"parisc64", "hppa"},
        {"sh4", "sh"},          {"vax-9000", "unknown"}, {"", "unknown"},
    };
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++)
        CHECK_STR(dg_arch_normalise(pairs[i][0]), pairs[i][1]);
    CHECK_STR(dg_arch_normalise(NULL), "unknown");
}

/* Random corruption of valid headers: only the sanitizers judge this. */
static void test_mutations(void)
{
    unsigned char base[6][300];
    size_t len[6];
    uint32_t cpus[] = {CPU_X86_64, CPU_ARM64, 18};
    len[0] = make_elf(base[0], true, true, 62);
    len[1] = make_elf(base[1], false, false, 22);
    len[2] = make_macho(base[2], true, true, CPU_ARM64);
    len[3] = make_macho(base[3], false, false, 18);
    len[4] = make_fat(base[4], false, 3, cpus);
    len[5] = make_fat(base[5], true, 3, cpus);
    uint64_t x = 0x9e3779b97f4a7c15u;
    int ok = 0;
    for (int iter = 0; iter < 20000; iter++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        int k = (int)(x % 6);
        unsigned char m[300];
        memcpy(m, base[k], len[k]);
        size_t l = len[k] - (size_t)((x >> 8) % 3 == 0 ? (x >> 16) % (len[k] + 1) : 0);
        for (int f = 0; f < 1 + (int)((x >> 24) % 4); f++)
            m[(x >> (32 + 4 * f)) % len[k]] ^= (unsigned char)(1u << ((x >> (40 + f)) % 8));
        dg_binfmt_info info;
        char err[128];
        if (parse_exact(m, l, &info, err, sizeof err) == DG_OK) {
            ok++;
            CHECK(info.nslices >= 1 && info.nslices <= DG_BINFMT_MAX_SLICES);
        }
    }
    CHECK(ok > 0);
}

/* ---- file API ------------------------------------------------------------------ */

static char tmpdir[512];

static void write_file(const char *rel, const void *data, size_t n, int mode)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", tmpdir, rel);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);
    if (fd < 0 || write(fd, data, n) != (ssize_t)n) {
        fprintf(stderr, "cannot write %s: %s\n", path, strerror(errno));
        exit(1);
    }
    close(fd);
}

static void mkdir_rel(const char *rel)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", tmpdir, rel);
    if (mkdir(path, 0755) != 0) {
        fprintf(stderr, "cannot mkdir %s: %s\n", path, strerror(errno));
        exit(1);
    }
}

static const char *tmp_path(const char *rel)
{
    static char path[4][1024];
    static int slot;
    slot = (slot + 1) % 4;
    snprintf(path[slot], sizeof path[slot], "%s/%s", tmpdir, rel);
    return path[slot];
}

static void test_files(void)
{
    unsigned char b[512];
    size_t n = make_elf(b, true, true, 183);
    write_file("elf_aarch64", b, n, 0644);
    uint32_t cpus[] = {CPU_X86_64, CPU_ARM64};
    n = make_fat(b, true, 2, cpus);
    write_file("fat64", b, n, 0644);
    write_file("empty", "", 0, 0644);
    write_file("text", "hello\nworld\n", 12, 0644);

    dg_binfmt_info info;
    char err[256];
    CHECK(dg_binfmt_file(tmp_path("elf_aarch64"), &info, err, sizeof err) == DG_OK);
    CHECK_STR(info.arch[0], "aarch64");
    CHECK(dg_binfmt_file(tmp_path("fat64"), &info, err, sizeof err) == DG_OK);
    CHECK(info.nslices == 2);
    CHECK(dg_binfmt_file(tmp_path("empty"), &info, err, sizeof err) == DG_ERR_FORMAT);
    CHECK(dg_binfmt_file(tmp_path("text"), &info, err, sizeof err) == DG_ERR_FORMAT);
    CHECK(dg_binfmt_file(tmp_path("no-such-file"), &info, err, sizeof err) == DG_ERR_IO);
    CHECK(err[0] != '\0');
    CHECK(dg_binfmt_file(tmpdir, &info, err, sizeof err) == DG_ERR_IO);
    CHECK(dg_binfmt_file(NULL, &info, err, sizeof err) == DG_ERR_IO);
    /* A FIFO must be refused without blocking on it. */
    if (mkfifo(tmp_path("fifo"), 0600) == 0)
        CHECK(dg_binfmt_file(tmp_path("fifo"), &info, err, sizeof err) == DG_ERR_IO);

    struct utsname u;
    CHECK(uname(&u) == 0);
    dg_status st = dg_binfmt_file("/proc/self/exe", &info, err, sizeof err);
    CHECK_MSG(st == DG_OK, "/proc/self/exe: %s", err);
    if (st == DG_OK) {
        CHECK_STR(info.arch[0], dg_arch_normalise(u.machine));
        CHECK(dg_binfmt_matches(&info, u.machine));
        CHECK(dg_binfmt_matches(&info, dg_arch_normalise(u.machine)));
    }
}

/* ---- dg_env_python ---------------------------------------------------------------- */

static const char *js(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : "<not a string>";
}

static const cJSON *jget(const cJSON *o, const char *key)
{
    return cJSON_GetObjectItemCaseSensitive(o, key);
}

static const char *run_status(const cJSON *o)
{
    return js(jget(o, "run"), "status");
}

static void dump_on_failure(const cJSON *o, int failed_before)
{
    if (check_failed == failed_before || !o)
        return;
    char *s = cJSON_Print(o);
    fprintf(stderr, "record: %s\n", s);
    cJSON_free(s);
}

/* True once pid has exited (gone, or a zombie waiting for its new parent). */
static bool gone(pid_t pid)
{
    for (int i = 0; i < 200; i++) {
        char path[64], buf[512];
        snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
        FILE *f = fopen(path, "r");
        if (!f)
            return true;
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = '\0';
        const char *rp = strrchr(buf, ')');
        if (!rp || (rp[1] == ' ' && rp[2] == 'Z'))
            return true;
        usleep(10000);
    }
    return false;
}

static pid_t read_pid(const char *rel)
{
    char *s = dg_read_file(tmp_path(rel), 64, NULL);
    pid_t pid = s ? (pid_t)atoi(s) : 0;
    dg_free(s);
    return pid;
}

static void check_fake_binary(const cJSON *o)
{
    /* A shell script is not an executable format: no binary, and a reason. */
    CHECK(cJSON_IsNull(jget(o, "binary")));
    CHECK(cJSON_IsString(jget(o, "binary_error")));
    CHECK(cJSON_IsNull(jget(o, "arch_matches_host")));
}

static void test_python_fakes(const char *host)
{
    char script[2048];
    int before;

    /* Hangs, with a grandchild holding the pipe open: must be killed whole. */
    snprintf(script, sizeof script, "#!/bin/sh\necho $$ > '%s'\nsleep 30 &\necho $! > '%s'\nwait\n",
             tmp_path("hang.pid"), tmp_path("sleep.pid"));
    write_file("hang.sh", script, strlen(script), 0755);
    before = check_failed;
    double t0 = dg_now();
    cJSON *o = dg_env_python(NULL, tmp_path("hang.sh"), 1.0, host);
    double took = dg_now() - t0;
    CHECK(o != NULL);
    CHECK_STR(run_status(o), "timeout");
    CHECK_MSG(took < 5.0, "timeout took %.2f s", took);
    CHECK(cJSON_IsNull(jget(jget(o, "run"), "exit_code")));
    CHECK(cJSON_IsNull(jget(o, "torch")));
    CHECK(cJSON_IsNull(jget(o, "version")));
    const cJSON *secs = jget(jget(o, "run"), "seconds");
    CHECK(cJSON_IsNumber(jget(secs, "value")) && jget(secs, "value")->valuedouble >= 0.9);
    check_fake_binary(o);
    pid_t hp = read_pid("hang.pid"), sp = read_pid("sleep.pid");
    CHECK(hp > 0 && gone(hp));
    CHECK_MSG(sp > 0 && gone(sp), "grandchild %d survived the timeout", (int)sp);
    dump_on_failure(o, before);
    cJSON_Delete(o);

    /* Crashes. */
    const char *segv = "#!/bin/sh\nkill -SEGV $$\nsleep 5\n";
    write_file("segv.sh", segv, strlen(segv), 0755);
    before = check_failed;
    o = dg_env_python(NULL, tmp_path("segv.sh"), 10.0, host);
    CHECK_STR(run_status(o), "crashed");
    const cJSON *sig = jget(jget(o, "run"), "signal");
    CHECK(cJSON_IsNumber(sig) && sig->valueint == SIGSEGV);
    CHECK(cJSON_IsString(jget(jget(o, "run"), "error")));
    check_fake_binary(o);
    dump_on_failure(o, before);
    cJSON_Delete(o);

    /* Answers garbage (with hostile control bytes) and exits 0. */
    const char *garbage = "#!/bin/sh\nprintf 'not json {\\033[31m\\n{\"half\": \\n'\n";
    write_file("garbage.sh", garbage, strlen(garbage), 0755);
    before = check_failed;
    o = dg_env_python(NULL, tmp_path("garbage.sh"), 10.0, host);
    CHECK_STR(run_status(o), "failed");
    const char *e = js(jget(o, "run"), "error");
    CHECK_MSG(strstr(e, "not JSON") != NULL, "error \"%s\"", e);
    CHECK(strchr(e, '\033') == NULL);
    CHECK(jget(jget(o, "run"), "exit_code")->valueint == 0);
    dump_on_failure(o, before);
    cJSON_Delete(o);

    /* Fails with a message on stderr. */
    const char *fail = "#!/bin/sh\necho 'boom: no libpython here' >&2\necho more >&2\nexit 3\n";
    write_file("fail.sh", fail, strlen(fail), 0755);
    before = check_failed;
    o = dg_env_python(NULL, tmp_path("fail.sh"), 10.0, host);
    CHECK_STR(run_status(o), "failed");
    CHECK(jget(jget(o, "run"), "exit_code")->valueint == 3);
    e = js(jget(o, "run"), "error");
    CHECK_MSG(strstr(e, "boom: no libpython here") != NULL && !strstr(e, "more"), "error \"%s\"",
              e);
    dump_on_failure(o, before);
    cJSON_Delete(o);

    /* Answers the basics, then hangs while "probing torch". */
    snprintf(script, sizeof script,
             "#!/bin/sh\necho '{\"version\": \"3.99.1\", \"platform\": \"linux\", "
             "\"machine\": \"x86_64\", \"site_packages\": []}'\nexec sleep 30\n");
    write_file("half.sh", script, strlen(script), 0755);
    before = check_failed;
    o = dg_env_python(NULL, tmp_path("half.sh"), 1.0, host);
    CHECK_STR(run_status(o), "timeout");
    CHECK_STR(js(o, "version"), "3.99.1");
    const cJSON *t = jget(o, "torch");
    CHECK(cJSON_IsObject(t) && cJSON_IsNull(jget(t, "version")));
    CHECK(strstr(js(t, "error"), "timeout") != NULL);
    dump_on_failure(o, before);
    cJSON_Delete(o);

    /* Not there at all. */
    before = check_failed;
    o = dg_env_python(NULL, tmp_path("no-such-python"), 1.0, host);
    CHECK_STR(run_status(o), "not-found");
    CHECK(cJSON_IsNull(jget(o, "resolved")));
    CHECK(cJSON_IsNull(jget(o, "binary")));
    CHECK(cJSON_IsNull(jget(jget(jget(o, "run"), "seconds"), "value")));
    CHECK(cJSON_IsNumber(jget(o, "extensions_scanned")));
    dump_on_failure(o, before);
    cJSON_Delete(o);
    o = dg_env_python(NULL, "devgate-no-such-python-on-path", 1.0, host);
    CHECK_STR(run_status(o), "not-found");
    cJSON_Delete(o);
    o = dg_env_python(NULL, NULL, 1.0, host);
    CHECK_STR(run_status(o), "not-found");
    CHECK(cJSON_IsNull(jget(o, "path")));
    cJSON_Delete(o);

    /* A launcher script (as pyenv and conda install) whose interpreter names
     * its real executable: the binary is read from there. */
    char self[1024];
    if (realpath("/proc/self/exe", self)) {
        snprintf(script, sizeof script,
                 "#!/bin/sh\necho '{\"version\": \"3.99.2\", \"executable\": \"%s\", "
                 "\"site_packages\": []}'\necho '{\"torch\": null}'\n",
                 self);
        write_file("shim.sh", script, strlen(script), 0755);
        before = check_failed;
        o = dg_env_python(NULL, tmp_path("shim.sh"), 10.0, host);
        CHECK_STR(run_status(o), "ok");
        CHECK(cJSON_IsObject(jget(o, "binary")));
        CHECK_STR(js(o, "binary_path"), self);
        CHECK(cJSON_IsNull(jget(o, "binary_error")));
        CHECK(cJSON_IsTrue(jget(o, "arch_matches_host")));
        CHECK_STR(js(o, "reference_arch"), host);
        dump_on_failure(o, before);
        cJSON_Delete(o);
        /* An unknown host is no reason to call the binary foreign. */
        o = dg_env_python(NULL, tmp_path("shim.sh"), 10.0, "unknown");
        CHECK(cJSON_IsNull(jget(o, "arch_matches_host")));
        CHECK_STR(js(o, "reference_arch"), host);
        cJSON_Delete(o);
    }

    /* Exists, but what it needs to start does not. */
    snprintf(script, sizeof script, "#!%s\n", tmp_path("no-such-shell"));
    write_file("badshebang.sh", script, strlen(script), 0755);
    o = dg_env_python(NULL, tmp_path("badshebang.sh"), 1.0, host);
    CHECK_STR(run_status(o), "failed");
    CHECK(strstr(js(jget(o, "run"), "error"), "missing") != NULL);
    cJSON_Delete(o);

    /* Exists but cannot be executed. */
    write_file("noexec.sh", "#!/bin/sh\n", 10, 0644);
    o = dg_env_python(NULL, tmp_path("noexec.sh"), 1.0, host);
    CHECK_STR(run_status(o), "failed");
    cJSON_Delete(o);
}

static void test_python_mixed(const char *host)
{
    unsigned char b[512];
    size_t n;
    mkdir_rel("site");
    mkdir_rel("site/pkg");
    mkdir_rel("site/pkg/deep");
    n = make_elf(b, true, true, 183);
    write_file("site/pkg/_native_arm.cpython-311-aarch64-linux-gnu.so", b, n, 0644);
    write_file("site/pkg/not_an_extension.bin", b, n, 0644); /* wrong name: ignored */
    n = make_elf(b, true, true, 62);
    write_file("site/pkg/_native.cpython-311-x86_64-linux-gnu.so", b, n, 0644);
    write_file("site/pkg/deep/libok.so.1", b, n, 0644);
    uint32_t cpus[] = {CPU_ARM64, CPU_X86_64};
    n = make_fat(b, false, 2, cpus);
    write_file("site/pkg/deep/libuniversal.dylib", b, n, 0644);
    write_file("site/pkg/libld_script.so", "GROUP ( libfoo.so.1 )\n", 22, 0644);
    /* Links are not followed: neither the loop nor the foreign file behind. */
    CHECK(symlink("..", tmp_path("site/pkg/deep/loop")) == 0);
    CHECK(symlink("../_native_arm.cpython-311-aarch64-linux-gnu.so",
                  tmp_path("site/pkg/deep/alias.so")) == 0);

    char script[2048];
    snprintf(
        script, sizeof script,
        "#!/bin/sh\necho 'warming up'\n"
        "echo '{\"version\": \"3.99.0\", \"platform\": \"linux\", \"machine\": \"x86_64\", "
        "\"executable\": null, \"site_packages\": [\"%s/\", \"relative/ignored\", 7, \"%s\"]}'\n"
        "echo '{\"torch\": null}'\n",
        tmp_path("site"), tmp_path("site"));
    write_file("mixed.sh", script, strlen(script), 0755);

    int before = check_failed;
    cJSON *o = dg_env_python(NULL, tmp_path("mixed.sh"), 10.0, host);
    CHECK_STR(run_status(o), "ok");
    CHECK_STR(js(o, "version"), "3.99.0");
    CHECK(cJSON_IsNull(jget(o, "torch")));
    check_fake_binary(o);
    CHECK_STR(js(o, "reference_arch"), "x86_64");
    CHECK(cJSON_GetArraySize(jget(o, "site_packages")) == 1);
    CHECK_STR(cJSON_GetArrayItem(jget(o, "site_packages"), 0)->valuestring, tmp_path("site"));
    CHECK(jget(o, "extensions_scanned")->valueint == 4);
    CHECK(jget(o, "extensions_unparsed")->valueint == 1);
    CHECK(cJSON_IsFalse(jget(o, "scan_limited")));
    const cJSON *mixed = jget(o, "mixed_extensions");
    CHECK(cJSON_GetArraySize(mixed) == 1);
    const cJSON *m0 = cJSON_GetArrayItem(mixed, 0);
    CHECK_STR(js(m0, "path"), "pkg/_native_arm.cpython-311-aarch64-linux-gnu.so");
    CHECK(cJSON_GetArraySize(jget(m0, "arch")) == 1);
    CHECK_STR(cJSON_GetArrayItem(jget(m0, "arch"), 0)->valuestring, "aarch64");
    CHECK(jget(o, "mixed_extensions_truncated")->valueint == 0);
    dump_on_failure(o, before);
    cJSON_Delete(o);

    /* More foreign modules than the record keeps. */
    mkdir_rel("site2");
    n = make_elf(b, true, false, 22);
    for (int i = 0; i < 205; i++) {
        char rel[64];
        snprintf(rel, sizeof rel, "site2/m%03d.so", i);
        write_file(rel, b, n, 0644);
    }
    snprintf(script, sizeof script,
             "#!/bin/sh\necho '{\"version\": \"3.99.0\", \"machine\": \"x86_64\", "
             "\"site_packages\": [\"%s\"], \"torch\": {\"version\": \"9.9\", "
             "\"cuda_available\": \"yes\", \"cuda_device_count\": 2, \"error\": 5}}'\n",
             tmp_path("site2"));
    write_file("many.sh", script, strlen(script), 0755);
    before = check_failed;
    o = dg_env_python(NULL, tmp_path("many.sh"), 10.0, host);
    CHECK_STR(run_status(o), "ok");
    CHECK(cJSON_GetArraySize(jget(o, "mixed_extensions")) == 200);
    CHECK(jget(o, "mixed_extensions_truncated")->valueint == 5);
    CHECK(jget(o, "extensions_scanned")->valueint == 205);
    CHECK_STR(js(cJSON_GetArrayItem(jget(o, "mixed_extensions"), 0), "path"), "m000.so");
    /* Values of the wrong type from the child are dropped, not trusted. */
    const cJSON *t = jget(o, "torch");
    CHECK_STR(js(t, "version"), "9.9");
    CHECK(cJSON_IsNull(jget(t, "cuda_available")));
    CHECK(cJSON_IsNumber(jget(t, "cuda_device_count")) &&
          jget(t, "cuda_device_count")->valueint == 2);
    CHECK(cJSON_IsNull(jget(t, "error")));
    CHECK(cJSON_IsNull(jget(t, "mps_built")));
    dump_on_failure(o, before);
    cJSON_Delete(o);
}

static void test_python_real(const char *host)
{
    const char *py = "/usr/bin/python3";
    if (access(py, X_OK) != 0) {
        printf("note: %s not present, real-interpreter checks skipped\n", py);
        return;
    }
    int before = check_failed;
    cJSON *o = dg_env_python(NULL, py, 60.0, host);
    CHECK(o != NULL);
    CHECK_STR(run_status(o), "ok");
    CHECK(strlen(js(o, "version")) > 0 && strcmp(js(o, "version"), "<not a string>") != 0);
    CHECK_STR(js(o, "platform"), "linux");
    CHECK(cJSON_IsObject(jget(o, "binary")));
    CHECK(cJSON_IsTrue(jget(o, "arch_matches_host")));
    CHECK(cJSON_IsArray(jget(o, "site_packages")));
    CHECK(cJSON_GetArraySize(jget(o, "mixed_extensions")) == 0);
    const cJSON *t = jget(o, "torch");
    CHECK(t != NULL);
    if (system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") == 0) {
        CHECK(cJSON_IsObject(t));
        CHECK(cJSON_IsString(jget(t, "version")));
        CHECK(cJSON_IsBool(jget(t, "cuda_available")));
        CHECK(cJSON_IsNumber(jget(t, "cuda_device_count")));
        CHECK(jget(o, "extensions_scanned")->valueint > 0);
    } else {
        printf("note: torch not importable by %s, torch checks skipped\n", py);
    }
    dump_on_failure(o, before);
    cJSON_Delete(o);
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

int main(void)
{
    size_t live0;
    dg_host_mem_stats(&live0, NULL);

    test_elf();
    test_macho();
    check_fat(false);
    check_fat(true);
    test_other();
    test_normalise();
    test_mutations();

    const char *base = getenv("TMPDIR");
    snprintf(tmpdir, sizeof tmpdir, "%s/dg_binfmt_XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(tmpdir)) {
        fprintf(stderr, "mkdtemp: %s\n", strerror(errno));
        return 1;
    }
    test_files();

    struct utsname u;
    uname(&u);
    const char *host = dg_arch_normalise(u.machine);
    test_python_fakes(host);
    test_python_mixed(host);
    test_python_real(host);

    nftw(tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);

    size_t live;
    dg_host_mem_stats(&live, NULL);
    CHECK_MSG(live == live0, "host bytes leaked: %zu", live - live0);
    CHECK_DONE();
}
