/* Python interpreter inspection for the environment proof (docs/schema/env.md,
 * section "python"). The interpreter runs once, without a shell, under a
 * deadline; whatever it says is treated as untrusted text: sizes are capped,
 * types are checked and strings are cleaned before they enter the record. */
#include "env.h"

#include "binfmt.h"
#include "core/proc.h"
#include "env/python_int.h"

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
    dg_py_run pr; /* how it ran; its error and outputs point into the members below */
    char error[STR_MAX];
    bool has_error;
    dg_capbuf out; /* the answer on stdout, capped at OUT_MAX */
    dg_capbuf err; /* stderr, capped at ERR_MAX */
} run_result;

static void set_error(run_result *r, const char *fmt, ...) DG_PRINTF(2, 3);

static void set_error(run_result *r, const char *fmt, ...)
{
    char raw[STR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(raw, sizeof raw, fmt, ap);
    va_end(ap);
    dg_py_rec_clean(r->error, sizeof r->error, raw);
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
        r->pr.status = "failed";
        if (st == DG_ERR_NOMEM)
            return false;
        /* The file exists (it was resolved), so a missing file is what it
         * needs: the runner's message says so. */
        set_error(r, "%s", pr.error);
        return true;
    }
    r->pr.seconds = pr.wall_s;
    r->pr.has_seconds = true;
    if (st == DG_ERR_NOMEM)
        return false;
    if (pr.timed_out) {
        r->pr.status = "timeout";
        set_error(r, "no answer within %.1f s; process group killed", timeout_s);
    } else if (st != DG_OK) {
        r->pr.status = "failed";
        set_error(r, "%s", pr.error);
    } else if (pr.sig) {
        r->pr.status = "crashed";
        r->pr.sig = pr.sig;
        r->pr.has_sig = true;
        set_error(r, "killed by signal %d (%s)", r->pr.sig, strsignal(r->pr.sig));
    } else {
        r->pr.exit_code = pr.exit_code;
        r->pr.has_exit = true;
        r->pr.status = r->pr.exit_code == 0 ? "ok" : "failed";
    }
    return true;
}

/* ---- site-packages walk --------------------------------------------------- */

typedef struct scan {
    dg_pyjb *b;
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
    dg_py_rec_clean(rel, sizeof rel, path + root_len + (path[root_len] == '/'));
    cJSON *e = dg_pyjb_chk(s->b, cJSON_CreateObject());
    cJSON *arch = dg_pyjb_chk(s->b, cJSON_CreateArray());
    for (int i = 0; arch && i < info.nslices; i++)
        dg_pyjb_push(s->b, arch, cJSON_CreateString(info.arch[i]));
    dg_pyjb_put_str(s->b, e, "path", rel);
    dg_pyjb_put(s->b, e, "arch", arch);
    dg_pyjb_push(s->b, s->mixed, e);
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

static cJSON *binary_object(dg_pyjb *b, const dg_binfmt_info *info)
{
    cJSON *o = dg_pyjb_chk(b, cJSON_CreateObject());
    cJSON *arch = dg_pyjb_chk(b, cJSON_CreateArray());
    for (int i = 0; arch && i < info->nslices; i++)
        dg_pyjb_push(b, arch, cJSON_CreateString(info->arch[i]));
    dg_pyjb_put_str(b, o, "format", info->format);
    dg_pyjb_put(b, o, "arch", arch);
    dg_pyjb_put_num(b, o, "bits", info->bits, true);
    return o;
}

static bool slices_have(const dg_binfmt_info *info, const char *arch)
{
    for (int i = 0; i < info->nslices; i++)
        if (strcmp(info->arch[i], arch) == 0)
            return true;
    return false;
}

/* The interpreter's binary into *info and binpath (PATH_MAX bytes): the file
 * run (resolved; NULL when it could not be, resolve_errno saying why, 0 when
 * missing), or, when that is a launcher script (pyenv shims, conda wrappers),
 * the executable the interpreter says it is (exe_said). False with why in
 * binerr (256 bytes) when there is none. */
static bool find_binary(const char *resolved, int resolve_errno, const char *exe_said,
                        dg_binfmt_info *info, char *binpath, char *binerr)
{
    bool have_bin = false;
    if (resolved) {
        snprintf(binpath, PATH_MAX, "%s", resolved);
        have_bin = dg_binfmt_file(resolved, info, binerr, 256) == DG_OK;
    } else if (resolve_errno) {
        snprintf(binerr, 256, "cannot resolve path: %s", strerror(resolve_errno));
    } else {
        snprintf(binerr, 256, "not found");
    }
    if (!have_bin && resolved && exe_said && exe_said[0] == '/') {
        char real2[PATH_MAX];
        dg_binfmt_info info2;
        char err2[256];
        if (realpath(exe_said, real2) && strcmp(real2, resolved) != 0 &&
            dg_binfmt_file(real2, &info2, err2, sizeof err2) == DG_OK) {
            *info = info2;
            have_bin = true;
            snprintf(binpath, PATH_MAX, "%s", real2);
        }
    }
    return have_bin;
}

/* The architecture extensions are checked against: the one the interpreter
 * runs as (machine, what it reports: right for a universal binary or under
 * emulation) when its binary (info; NULL: none) agrees, else the binary's
 * own, else the host's (host_norm, normalised); NULL when none is known. */
static const char *reference_arch(const dg_binfmt_info *info, const char *machine,
                                  const char *host_norm)
{
    const char *mnorm = machine ? dg_arch_normalise(machine) : "unknown";
    bool mknown = strcmp(mnorm, "unknown") != 0;
    bool host_known = strcmp(host_norm, "unknown") != 0;
    if (info) {
        if (mknown && slices_have(info, mnorm))
            return mnorm;
        if (host_known && slices_have(info, host_norm))
            return host_norm;
        return info->arch[0];
    }
    return mknown ? mnorm : host_known ? host_norm : NULL;
}

cJSON *dg_env_python(dg_ctx *ctx, const char *python, double timeout_s, const char *host_arch)
{
    (void)ctx;
    if (!(timeout_s > 0))
        timeout_s = DEFAULT_TIMEOUT_S;
    dg_pyjb b = {false};
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
        dg_py_rec_clean(clean, sizeof clean, python);
    dg_pyjb_put_str(&b, o, "path", python ? clean : NULL);
    if (have_resolved)
        dg_py_rec_clean(clean, sizeof clean, resolved);
    dg_pyjb_put_str(&b, o, "resolved", have_resolved ? clean : NULL);

    run_result r;
    memset(&r, 0, sizeof r);
    r.pr.status = "failed";
    r.out.cap = OUT_MAX;
    r.err.cap = ERR_MAX;
    if (missing) {
        r.pr.status = "not-found";
        set_error(&r, "%s",
                  !python || !*python ? "no interpreter given"
                  : !exe              ? "not found on PATH"
                                      : "no such file");
    } else if (!run_probe(exe, timeout_s, &r)) {
        b.oom = true;
    }
    dg_py_run pr = r.pr;
    pr.error = r.has_error ? r.error : NULL;
    pr.out = r.out.data;
    pr.out_len = r.out.len;
    pr.out_truncated = r.out.truncated;
    pr.out_cap = OUT_MAX;
    pr.err = r.err.data;
    pr.err_len = r.err.len;
    cJSON *dirs = NULL, *ans = dg_env_python_answer(&pr, &dirs);
    if (!ans)
        b.oom = true;

    /* Binary: the file run, or, when that is a launcher script (pyenv shims,
     * conda wrappers), the executable the interpreter says it is. */
    dg_binfmt_info info;
    char binerr[256] = "", binpath[PATH_MAX] = "";
    bool have_bin = find_binary(have_resolved ? resolved : NULL, missing ? 0 : resolve_errno,
                                dg_jstr(ans, "executable"), &info, binpath, binerr);
    dg_pyjb_put(&b, o, "binary", have_bin ? binary_object(&b, &info) : cJSON_CreateNull());
    if (have_bin)
        dg_py_rec_clean(clean, sizeof clean, binpath);
    dg_pyjb_put_str(&b, o, "binary_path", have_bin ? clean : NULL);
    char binerr_clean[256];
    dg_py_rec_clean(binerr_clean, sizeof binerr_clean, binerr);
    dg_pyjb_put_str(&b, o, "binary_error", have_bin ? NULL : binerr_clean);
    /* An unknown host ("unknown" from the caller) cannot be compared with:
     * null, not a false mismatch. */
    const char *host_norm = host_arch ? dg_arch_normalise(host_arch) : "unknown";
    bool host_known = strcmp(host_norm, "unknown") != 0;
    dg_pyjb_put_bool(&b, o, "arch_matches_host",
                     have_bin && host_known ? dg_binfmt_matches(&info, host_arch) : -1);

    /* the answer's members, in the record's order */
    static const char *const keys[] = {"run",     "version",    "platform",
                                       "machine", "executable", "torch"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        dg_pyjb_put(&b, o, keys[i], cJSON_DetachItemFromObjectCaseSensitive(ans, keys[i]));
    const char *machine = dg_jstr(o, "machine");

    const char *ref = reference_arch(have_bin ? &info : NULL, machine, host_norm);

    scan s = {.b = &b, .ref = ref, .mixed = dg_pyjb_chk(&b, cJSON_CreateArray())};
    const cJSON *d;
    cJSON_ArrayForEach(d, dirs)
    {
        if (b.oom)
            break;
        char dir[PATH_MAX];
        size_t len = strlen(d->valuestring);
        memcpy(dir, d->valuestring, len + 1); /* under PATH_MAX: dg_env_python_answer checked */
        scan_dir(&s, dir, len, len, 0);
    }
    dg_pyjb_put(&b, o, "site_packages",
                cJSON_DetachItemFromObjectCaseSensitive(ans, "site_packages"));
    dg_pyjb_put_str(&b, o, "reference_arch", ref);
    dg_pyjb_put_num(&b, o, "extensions_scanned", (double)s.scanned, true);
    dg_pyjb_put_num(&b, o, "extensions_unparsed", (double)s.unparsed, true);
    dg_pyjb_put_bool(&b, o, "scan_limited", s.limited);
    dg_pyjb_put(&b, o, "mixed_extensions", s.mixed);
    dg_pyjb_put_num(&b, o, "mixed_extensions_truncated", (double)s.truncated, true);

    cJSON_Delete(ans);
    cJSON_Delete(dirs);
    dg_free(r.out.data);
    dg_free(r.err.data);
    if (b.oom) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}
