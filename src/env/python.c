/* Python interpreter inspection for the environment proof (docs/schema/env.md,
 * section "python"). The interpreter runs once, without a shell, under a
 * deadline; whatever it says is treated as untrusted text: sizes are capped,
 * types are checked and strings are cleaned before they enter the record. */
#include "env.h"

#include "binfmt.h"
#include "core/proc.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define OUT_MAX ((size_t)1 << 20)  /* stdout kept for parsing */
#define ERR_MAX ((size_t)64 << 10) /* stderr kept for the error line */
#define OUT_LINES_MAX 16           /* JSON lines considered */
#define STR_MAX 512                /* cap on strings copied from the child */
#define SITE_MAX 64                /* site-packages directories considered */
#define SCAN_DEPTH_MAX 12
#define SCAN_FILES_MAX 200000
#define MIXED_MAX 200
#define DEFAULT_TIMEOUT_S 60.0 /* importing torch on a busy 2-core machine can take 20 s */

/* Runs inside the interpreter. It moves its own stdout onto stderr first so
 * that anything torch or a site hook prints cannot corrupt the answer, then
 * writes two JSON lines: the basics before touching torch, torch after, so a
 * torch that hangs or crashes still leaves the basics behind. Written for
 * Python 2 syntax too, so an old interpreter answers instead of failing. */
static const char probe_script[] =
    "import os, sys, json\n"
    "o = os.fdopen(os.dup(1), 'w')\n"
    "os.dup2(2, 1)\n"
    "def emit(d):\n"
    "    o.write(json.dumps(d) + '\\n')\n"
    "    o.flush()\n"
    "r = {'version': sys.version.split()[0], 'platform': sys.platform,\n"
    "     'executable': sys.executable, 'machine': None, 'site_packages': []}\n"
    "try:\n"
    "    import platform\n"
    "    r['machine'] = platform.machine()\n"
    "except Exception:\n"
    "    pass\n"
    "sp = []\n"
    "try:\n"
    "    import site\n"
    "    sp.extend(site.getsitepackages())\n"
    "except Exception:\n"
    "    pass\n"
    "try:\n"
    "    import site\n"
    "    if site.ENABLE_USER_SITE:\n"
    "        sp.append(site.getusersitepackages())\n"
    "except Exception:\n"
    "    pass\n"
    "for p in sys.path:\n"
    "    if p.rstrip('/').endswith(('site-packages', 'dist-packages')):\n"
    "        sp.append(p)\n"
    "seen = set()\n"
    "for p in sp:\n"
    "    try:\n"
    "        k = os.path.realpath(p)\n"
    "        if k not in seen and os.path.isdir(p):\n"
    "            seen.add(k)\n"
    "            r['site_packages'].append(os.path.abspath(p))\n"
    "    except Exception:\n"
    "        pass\n"
    "emit(r)\n"
    "t = None\n"
    "try:\n"
    "    import importlib.util\n"
    "    has = importlib.util.find_spec('torch') is not None\n"
    "except Exception:\n"
    "    has = None\n"
    "if has is not False:\n"
    "    t = {'version': None, 'cuda_available': None, 'cuda_device_count': None,\n"
    "         'mps_built': None, 'mps_available': None, 'error': None}\n"
    "    errs = []\n"
    "    try:\n"
    "        import torch\n"
    "        t['version'] = str(torch.__version__)\n"
    "    except BaseException as e:\n"
    "        torch = None\n"
    "        if has is None and isinstance(e, ImportError):\n"
    "            t = None\n"
    "        else:\n"
    "            errs.append('import: %s: %s' % (type(e).__name__, e))\n"
    "    def g(k, f):\n"
    "        try:\n"
    "            t[k] = f()\n"
    "        except BaseException as e:\n"
    "            errs.append('%s: %s: %s' % (k, type(e).__name__, e))\n"
    "    if torch is not None:\n"
    "        g('cuda_available', lambda: bool(torch.cuda.is_available()))\n"
    "        g('cuda_device_count', lambda: int(torch.cuda.device_count()))\n"
    "        if hasattr(torch.backends, 'mps'):\n"
    "            g('mps_built', lambda: bool(torch.backends.mps.is_built()))\n"
    "            g('mps_available', lambda: bool(torch.backends.mps.is_available()))\n"
    "    if t is not None and errs:\n"
    "        t['error'] = '; '.join(errs)\n"
    "emit({'torch': t})\n";

/* ---- JSON building with one out-of-memory flag --------------------------- */

typedef struct jb {
    bool oom;
} jb;

static cJSON *chk(jb *b, cJSON *item)
{
    if (!item)
        b->oom = true;
    return item;
}

static void put(jb *b, cJSON *obj, const char *key, cJSON *item)
{
    if (!item || !obj || !cJSON_AddItemToObject(obj, key, item)) {
        b->oom = true;
        cJSON_Delete(item);
    }
}

static void put_str(jb *b, cJSON *obj, const char *key, const char *s)
{
    put(b, obj, key, dg_json_string(s));
}

static void put_num(jb *b, cJSON *obj, const char *key, double v, bool valid)
{
    put(b, obj, key, valid ? cJSON_CreateNumber(v) : cJSON_CreateNull());
}

static void put_bool(jb *b, cJSON *obj, const char *key, int v /* -1: null */)
{
    put(b, obj, key, v < 0 ? cJSON_CreateNull() : cJSON_CreateBool(v));
}

static void push(jb *b, cJSON *arr, cJSON *item)
{
    if (!item || !arr || !cJSON_AddItemToArray(arr, item)) {
        b->oom = true;
        cJSON_Delete(item);
    }
}

/* ---- locating the interpreter ------------------------------------------- */

/* Looks name up in $PATH (the system default path when unset) the way execvp
 * would; true with the candidate in buf. */
static bool find_in_path(const char *name, char *buf, size_t n)
{
    const char *path = getenv("PATH");
    char defpath[256];
    if (!path || !*path) {
        size_t got = confstr(_CS_PATH, defpath, sizeof defpath);
        if (got == 0 || got > sizeof defpath)
            return false;
        path = defpath;
    }
    for (const char *p = path;;) {
        const char *end = strchr(p, ':');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        /* An empty element means the current directory, as for execvp. */
        int w =
            len ? snprintf(buf, n, "%.*s/%s", (int)len, p, name) : snprintf(buf, n, "./%s", name);
        struct stat sb;
        if (w > 0 && (size_t)w < n && stat(buf, &sb) == 0 && S_ISREG(sb.st_mode) &&
            access(buf, X_OK) == 0)
            return true;
        if (!end)
            return false;
        p = end + 1;
    }
}

/* ---- running it --------------------------------------------------------- */

typedef struct run_result {
    const char *status; /* ok, timeout, crashed, failed, not-found */
    int exit_code;
    bool has_exit;
    int sig;
    bool has_sig;
    double seconds;
    bool has_seconds;
    char error[STR_MAX];
    bool has_error;
    dg_capbuf out; /* the answer on stdout, capped at OUT_MAX */
    dg_capbuf err; /* stderr, capped at ERR_MAX */
} run_result;

/* Copies src into dst (size n) for the record, as docs/schema/env.md says
 * text from the system enters records: invalid UTF-8 becomes U+FFFD, controls
 * '?' (tabs and newlines a space first), never cutting a sequence. The
 * terminal's '?' for invalid bytes is the printer's business (dg_text_clean). */
static void rec_clean(char *dst, size_t n, const char *src)
{
    size_t len = strlen(src);
    char *flat = dg_malloc(len + 1);
    if (!flat) {
        if (n)
            dst[0] = '\0';
        return;
    }
    for (size_t i = 0; i <= len; i++)
        flat[i] = src[i] == '\n' || src[i] == '\t' || src[i] == '\r' ? ' ' : src[i];
    dg_utf8_clean(dst, n, flat, len, true);
    dg_free(flat);
}

static void set_error(run_result *r, const char *fmt, ...) DG_PRINTF(2, 3);

static void set_error(run_result *r, const char *fmt, ...)
{
    char raw[STR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(raw, sizeof raw, fmt, ap);
    va_end(ap);
    rec_clean(r->error, sizeof r->error, raw);
    r->has_error = true;
}

/* Runs exe -c probe_script with stdin on /dev/null and both outputs captured
 * (capped at r->out.cap and r->err.cap), in a process group of its own that
 * is killed at the deadline. false only when out of memory. */
static bool run_probe(const char *exe, double timeout_s, run_result *r)
{
    const char *argv[] = {exe, "-c", probe_script, NULL};
    dg_proc_opts o = {.argv = argv,
                      .out = {.kind = DG_PROC_CAPTURE, .cap = r->out.cap},
                      .err = {.kind = DG_PROC_CAPTURE, .cap = r->err.cap},
                      .timeout_s = timeout_s};
    dg_proc_result pr;
    dg_status st = dg_proc_run(NULL, &o, &pr);
    r->out = pr.out;
    r->err = pr.err;
    if (!pr.started) {
        r->status = "failed";
        if (st == DG_ERR_NOMEM)
            return false;
        /* The file exists (it was resolved), so a missing file is what it
         * needs: the runner's message says so. */
        set_error(r, "%s", pr.error);
        return true;
    }
    r->seconds = pr.wall_s;
    r->has_seconds = true;
    if (st == DG_ERR_NOMEM)
        return false;
    if (pr.timed_out) {
        r->status = "timeout";
        set_error(r, "no answer within %.1f s; process group killed", timeout_s);
    } else if (st != DG_OK) {
        r->status = "failed";
        set_error(r, "%s", pr.error);
    } else if (pr.sig) {
        r->status = "crashed";
        r->sig = pr.sig;
        r->has_sig = true;
        set_error(r, "killed by signal %d (%s)", r->sig, strsignal(r->sig));
    } else {
        r->exit_code = pr.exit_code;
        r->has_exit = true;
        r->status = r->exit_code == 0 ? "ok" : "failed";
    }
    return true;
}

/* The line of stderr that says what went wrong: the first one, except for a
 * Python traceback, whose message is on its last line. */
static void stderr_reason(const run_result *r, char *dst, size_t n)
{
    dst[0] = '\0';
    if (!r->err.data)
        return;
    const char *s = r->err.data, *end = r->err.data + r->err.len;
    const char *best = NULL, *best_end = NULL;
    bool traceback = false;
    for (const char *p = s; p < end;) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl ? nl : end;
        const char *q = p;
        while (q < le && (*q == ' ' || *q == '\t' || *q == '\r'))
            q++;
        if (q < le) {
            if (!best && strncmp(q, "Traceback (most recent call last)", 33) == 0)
                traceback = true;
            if (!best || traceback) {
                best = q;
                best_end = le;
            }
        }
        p = nl ? nl + 1 : end;
    }
    if (!best)
        return;
    char line[STR_MAX];
    size_t len = (size_t)(best_end - best);
    if (len >= sizeof line)
        len = sizeof line - 1;
    memcpy(line, best, len);
    line[len] = '\0';
    rec_clean(dst, n, dg_trim(line));
}

/* ---- reading the child's answer ------------------------------------------ */

typedef struct answer {
    cJSON *objs[OUT_LINES_MAX];
    int n;
} answer;

static void parse_answer(answer *a, const char *out, size_t len)
{
    for (const char *p = out; p && p < out + len && a->n < OUT_LINES_MAX;) {
        const char *nl = memchr(p, '\n', (size_t)(out + len - p));
        const char *le = nl ? nl : out + len;
        while (p < le && (*p == ' ' || *p == '\t' || *p == '\r'))
            p++;
        if (p < le && *p == '{') {
            cJSON *o = cJSON_ParseWithLength(p, (size_t)(le - p));
            if (cJSON_IsObject(o))
                a->objs[a->n++] = o;
            else
                cJSON_Delete(o);
        }
        p = nl ? nl + 1 : out + len;
    }
}

/* Later lines override earlier ones, so a child may answer in pieces. */
static const cJSON *answer_get(const answer *a, const char *key)
{
    for (int i = a->n - 1; i >= 0; i--) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(a->objs[i], key);
        if (v)
            return v;
    }
    return NULL;
}

static bool answer_str(const answer *a, const char *key, char *dst, size_t n)
{
    const cJSON *v = answer_get(a, key);
    if (!cJSON_IsString(v) || !v->valuestring)
        return false;
    rec_clean(dst, n, v->valuestring);
    return true;
}

static int json_tristate(const cJSON *v)
{
    return cJSON_IsBool(v) ? cJSON_IsTrue(v) : -1;
}

static cJSON *torch_object(jb *b, const cJSON *t)
{
    cJSON *o = chk(b, cJSON_CreateObject());
    if (!o)
        return NULL;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(t, "version");
    char buf[STR_MAX];
    if (cJSON_IsString(v) && v->valuestring) {
        rec_clean(buf, 64, v->valuestring);
        put_str(b, o, "version", buf);
    } else {
        put_str(b, o, "version", NULL);
    }
    put_bool(b, o, "cuda_available",
             json_tristate(cJSON_GetObjectItemCaseSensitive(t, "cuda_available")));
    v = cJSON_GetObjectItemCaseSensitive(t, "cuda_device_count");
    bool count_ok = cJSON_IsNumber(v) && v->valuedouble >= 0 && v->valuedouble < 1e6;
    put_num(b, o, "cuda_device_count", count_ok ? (double)(long)v->valuedouble : 0, count_ok);
    put_bool(b, o, "mps_built", json_tristate(cJSON_GetObjectItemCaseSensitive(t, "mps_built")));
    put_bool(b, o, "mps_available",
             json_tristate(cJSON_GetObjectItemCaseSensitive(t, "mps_available")));
    v = cJSON_GetObjectItemCaseSensitive(t, "error");
    if (cJSON_IsString(v) && v->valuestring) {
        rec_clean(buf, sizeof buf, v->valuestring);
        put_str(b, o, "error", buf);
    } else {
        put_str(b, o, "error", NULL);
    }
    return o;
}

/* ---- site-packages walk --------------------------------------------------- */

typedef struct scan {
    jb *b;
    const char *ref; /* arch extensions must match; NULL: none known */
    cJSON *mixed;
    long mixed_n, truncated;
    long scanned, unparsed, entries;
    bool limited;
} scan;

static bool is_extension(const char *name)
{
    size_t n = strlen(name);
    return (n > 3 && strcmp(name + n - 3, ".so") == 0) ||
           (n > 6 && strcmp(name + n - 6, ".dylib") == 0) || strstr(name, ".so.") != NULL;
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void free_names(char **names, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dg_free(names[i]);
    dg_free(names);
}

static void check_extension(scan *s, const char *path, size_t root_len)
{
    dg_binfmt_info info;
    char why[128];
    if (dg_binfmt_file(path, &info, why, sizeof why) != DG_OK) {
        /* GNU ld scripts named libfoo.so and unreadable files: not code. */
        s->unparsed++;
        return;
    }
    s->scanned++;
    if (!s->ref || dg_binfmt_matches(&info, s->ref))
        return;
    if (s->mixed_n >= MIXED_MAX) {
        s->truncated++;
        return;
    }
    char rel[PATH_MAX];
    rec_clean(rel, sizeof rel, path + root_len + (path[root_len] == '/'));
    cJSON *e = chk(s->b, cJSON_CreateObject());
    cJSON *arch = chk(s->b, cJSON_CreateArray());
    for (int i = 0; arch && i < info.nslices; i++)
        push(s->b, arch, cJSON_CreateString(info.arch[i]));
    put_str(s->b, e, "path", rel);
    put(s->b, e, "arch", arch);
    push(s->b, s->mixed, e);
    s->mixed_n++;
}

/* Walks dir (a NUL-terminated path in buf of PATH_MAX bytes, len long). Only
 * the site directory itself may be a symbolic link; links below it are never
 * followed, which rules out loops and escapes from the tree. */
static void scan_dir(scan *s, char *buf, size_t len, size_t root_len, int depth)
{
    int fd = open(buf, O_RDONLY | O_DIRECTORY | O_CLOEXEC | (depth ? O_NOFOLLOW : 0));
    if (fd < 0)
        return;
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if (++s->entries > SCAN_FILES_MAX) {
            s->limited = true;
            break;
        }
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 64;
            char **nn = dg_realloc(names, nc * sizeof *nn);
            if (!nn) {
                s->b->oom = true;
                break;
            }
            names = nn;
            cap = nc;
        }
        if (!(names[n] = dg_strdup(e->d_name))) {
            s->b->oom = true;
            break;
        }
        n++;
    }
    /* Closed before descending so the walk holds one directory open at most. */
    closedir(d);
    if (s->b->oom) {
        free_names(names, n);
        return;
    }
    /* Sorted so that the record is the same on every run. */
    if (n)
        qsort(names, n, sizeof *names, cmp_names);
    for (size_t i = 0; i < n && !s->b->oom; i++) {
        size_t nl = strlen(names[i]);
        if (len + 1 + nl >= PATH_MAX) {
            s->limited = true;
            continue;
        }
        buf[len] = '/';
        memcpy(buf + len + 1, names[i], nl + 1);
        struct stat sb;
        if (lstat(buf, &sb) == 0) {
            if (S_ISDIR(sb.st_mode)) {
                if (depth + 1 > SCAN_DEPTH_MAX)
                    s->limited = true;
                else
                    scan_dir(s, buf, len + 1 + nl, root_len, depth + 1);
            } else if (S_ISREG(sb.st_mode) && is_extension(names[i])) {
                check_extension(s, buf, root_len);
            }
        }
        buf[len] = '\0';
    }
    free_names(names, n);
}

/* ---- assembly -------------------------------------------------------------- */

static cJSON *binary_object(jb *b, const dg_binfmt_info *info)
{
    cJSON *o = chk(b, cJSON_CreateObject());
    cJSON *arch = chk(b, cJSON_CreateArray());
    for (int i = 0; arch && i < info->nslices; i++)
        push(b, arch, cJSON_CreateString(info->arch[i]));
    put_str(b, o, "format", info->format);
    put(b, o, "arch", arch);
    put_num(b, o, "bits", info->bits, true);
    return o;
}

static bool slices_have(const dg_binfmt_info *info, const char *arch)
{
    for (int i = 0; i < info->nslices; i++)
        if (strcmp(info->arch[i], arch) == 0)
            return true;
    return false;
}

cJSON *dg_env_python(dg_ctx *ctx, const char *python, double timeout_s, const char *host_arch)
{
    (void)ctx;
    if (!(timeout_s > 0))
        timeout_s = DEFAULT_TIMEOUT_S;
    jb b = {false};
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;

    /* Locate: the path as given is what runs, because a virtual environment's
     * python is a symbolic link that finds its pyvenv.cfg by its own name; the
     * resolved file is what gets its header read. */
    char found[PATH_MAX];
    const char *exe = NULL;
    if (python && *python) {
        if (strchr(python, '/'))
            exe = python;
        else if (find_in_path(python, found, sizeof found))
            exe = found;
    }
    char resolved[PATH_MAX];
    bool have_resolved = exe && realpath(exe, resolved) != NULL;
    int resolve_errno = have_resolved || !exe ? 0 : errno;
    bool missing = !exe || resolve_errno == ENOENT || resolve_errno == ENOTDIR;

    char clean[PATH_MAX];
    if (python)
        rec_clean(clean, sizeof clean, python);
    put_str(&b, o, "path", python ? clean : NULL);
    if (have_resolved)
        rec_clean(clean, sizeof clean, resolved);
    put_str(&b, o, "resolved", have_resolved ? clean : NULL);

    run_result r;
    memset(&r, 0, sizeof r);
    r.status = "failed";
    r.out.cap = OUT_MAX;
    r.err.cap = ERR_MAX;
    answer a;
    memset(&a, 0, sizeof a);
    if (missing) {
        r.status = "not-found";
        set_error(&r, "%s",
                  !python || !*python ? "no interpreter given"
                  : !exe              ? "not found on PATH"
                                      : "no such file");
    } else if (!run_probe(exe, timeout_s, &r)) {
        b.oom = true;
    }
    if (r.out.data)
        parse_answer(&a, r.out.data, r.out.len);
    if (strcmp(r.status, "ok") == 0) {
        if (r.out.truncated) {
            r.status = "failed";
            set_error(&r, "answer longer than %zu bytes", OUT_MAX);
        } else if (a.n == 0) {
            char head[81];
            rec_clean(head, sizeof head, r.out.data ? dg_trim(r.out.data) : "");
            r.status = "failed";
            set_error(&r, "answer is not JSON: \"%s\"", head);
        }
    } else if (strcmp(r.status, "failed") == 0 && r.has_exit && !r.has_error) {
        char line[STR_MAX];
        stderr_reason(&r, line, sizeof line);
        set_error(&r, "exit status %d%s%s", r.exit_code, *line ? ": " : "", line);
    }

    /* Binary: the file run, or, when that is a launcher script (pyenv shims,
     * conda wrappers), the executable the interpreter says it is. */
    dg_binfmt_info info;
    char binerr[256] = "", binpath[PATH_MAX] = "";
    bool have_bin = false;
    if (have_resolved) {
        snprintf(binpath, sizeof binpath, "%s", resolved);
        have_bin = dg_binfmt_file(resolved, &info, binerr, sizeof binerr) == DG_OK;
    } else if (!missing) {
        snprintf(binerr, sizeof binerr, "cannot resolve path: %s", strerror(resolve_errno));
    } else {
        snprintf(binerr, sizeof binerr, "not found");
    }
    char exe_said[PATH_MAX];
    if (!have_bin && have_resolved && answer_str(&a, "executable", exe_said, sizeof exe_said) &&
        exe_said[0] == '/') {
        char real2[PATH_MAX];
        dg_binfmt_info info2;
        char err2[256];
        if (realpath(exe_said, real2) && strcmp(real2, resolved) != 0 &&
            dg_binfmt_file(real2, &info2, err2, sizeof err2) == DG_OK) {
            info = info2;
            have_bin = true;
            snprintf(binpath, sizeof binpath, "%s", real2);
        }
    }
    put(&b, o, "binary", have_bin ? binary_object(&b, &info) : cJSON_CreateNull());
    if (have_bin)
        rec_clean(clean, sizeof clean, binpath);
    put_str(&b, o, "binary_path", have_bin ? clean : NULL);
    char binerr_clean[256];
    rec_clean(binerr_clean, sizeof binerr_clean, binerr);
    put_str(&b, o, "binary_error", have_bin ? NULL : binerr_clean);
    /* An unknown host ("unknown" from the caller) cannot be compared with:
     * null, not a false mismatch. */
    const char *host_norm = host_arch ? dg_arch_normalise(host_arch) : "unknown";
    bool host_known = strcmp(host_norm, "unknown") != 0;
    put_bool(&b, o, "arch_matches_host",
             have_bin && host_known ? dg_binfmt_matches(&info, host_arch) : -1);

    cJSON *run = chk(&b, cJSON_CreateObject());
    put_str(&b, run, "status", r.status);
    put_num(&b, run, "exit_code", r.exit_code, r.has_exit);
    put_num(&b, run, "signal", r.sig, r.has_sig);
    put(&b, run, "seconds", dg_json_metric(r.seconds, r.has_seconds, "s"));
    put_str(&b, run, "error", r.has_error ? r.error : NULL);
    put(&b, o, "run", run);

    char version[64], platform[64], machine[64];
    bool has_version = answer_str(&a, "version", version, sizeof version);
    bool has_platform = answer_str(&a, "platform", platform, sizeof platform);
    bool has_machine = answer_str(&a, "machine", machine, sizeof machine);
    bool has_exe = answer_str(&a, "executable", exe_said, sizeof exe_said);
    put_str(&b, o, "version", has_version ? version : NULL);
    put_str(&b, o, "platform", has_platform ? platform : NULL);
    put_str(&b, o, "machine", has_machine ? machine : NULL);
    put_str(&b, o, "executable", has_exe ? exe_said : NULL);

    const cJSON *t = answer_get(&a, "torch");
    if (cJSON_IsObject(t)) {
        put(&b, o, "torch", torch_object(&b, t));
    } else if (!t && a.n > 0 && strcmp(r.status, "ok") != 0) {
        /* The basics arrived but the torch line never did: the interpreter
         * hung or died while importing or asking torch. */
        char why[STR_MAX];
        snprintf(why, sizeof why, "no answer: interpreter %s while probing torch", r.status);
        cJSON *tj = chk(&b, cJSON_CreateObject());
        if (tj && !cJSON_AddStringToObject(tj, "error", why))
            b.oom = true;
        put(&b, o, "torch", tj ? torch_object(&b, tj) : NULL);
        cJSON_Delete(tj);
    } else {
        put(&b, o, "torch", cJSON_CreateNull());
    }

    /* Extensions are checked against the architecture the interpreter runs
     * as: what it reports (right for a universal binary or under emulation)
     * when its binary agrees, else the binary's own, else the host's. */
    const char *ref = NULL;
    const char *mnorm = has_machine ? dg_arch_normalise(machine) : "unknown";
    bool mknown = strcmp(mnorm, "unknown") != 0;
    if (have_bin) {
        if (mknown && slices_have(&info, mnorm))
            ref = mnorm;
        else if (host_known && slices_have(&info, host_norm))
            ref = host_norm;
        else
            ref = info.arch[0];
    } else if (mknown) {
        ref = mnorm;
    } else if (host_known) {
        ref = host_norm;
    }

    cJSON *sites = chk(&b, cJSON_CreateArray());
    scan s = {.b = &b, .ref = ref, .mixed = chk(&b, cJSON_CreateArray())};
    const cJSON *sp = answer_get(&a, "site_packages");
    int nsites = 0;
    const cJSON *sp_arr = cJSON_IsArray(sp) ? sp : NULL, *it;
    cJSON_ArrayForEach(it, sp_arr)
    {
        if (nsites >= SITE_MAX || b.oom)
            break;
        if (!cJSON_IsString(it) || !it->valuestring || it->valuestring[0] != '/')
            continue;
        size_t len = strlen(it->valuestring);
        if (len >= PATH_MAX)
            continue;
        char dir[PATH_MAX];
        memcpy(dir, it->valuestring, len + 1);
        while (len > 1 && dir[len - 1] == '/')
            dir[--len] = '\0';
        rec_clean(clean, sizeof clean, dir);
        /* A directory named twice would count its modules twice. */
        bool dup = false;
        const cJSON *prev;
        cJSON_ArrayForEach(prev, sites)
        {
            if (cJSON_IsString(prev) && strcmp(prev->valuestring, clean) == 0)
                dup = true;
        }
        if (dup)
            continue;
        push(&b, sites, cJSON_CreateString(clean));
        nsites++;
        scan_dir(&s, dir, len, len, 0);
    }
    put(&b, o, "site_packages", sites);
    put_str(&b, o, "reference_arch", ref);
    put_num(&b, o, "extensions_scanned", (double)s.scanned, true);
    put_num(&b, o, "extensions_unparsed", (double)s.unparsed, true);
    put_bool(&b, o, "scan_limited", s.limited);
    put(&b, o, "mixed_extensions", s.mixed);
    put_num(&b, o, "mixed_extensions_truncated", (double)s.truncated, true);

    for (int i = 0; i < a.n; i++)
        cJSON_Delete(a.objs[i]);
    dg_free(r.out.data);
    dg_free(r.err.data);
    if (b.oom) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}
