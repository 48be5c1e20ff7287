/* The node side of devgate remote (`devgate __node [--cache DIR] REQUEST`):
 * who it is, its content-addressed cache (have, put; tree in node_tree.c),
 * the bucket probe, a run detached from the connection (start), its progress
 * (wait), its record (fetch), the runs left to collect (list, mark). Every
 * answer is JSON text for the other side; failures carry the protocol's exit
 * statuses through dg_remote_failure. docs/team.md. */
#include "remote/node_int.h"

#include "core/proc.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* A run's lock file below its folder (run_lost). */
#define RUN_LOCK "running"

static bool hex64(const char *s)
{
    if (!s || strlen(s) != 64)
        return false;
    for (int i = 0; i < 64; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return false;
    return true;
}

static bool plain_name(const char *s)
{
    return s && s[0] && s[0] != '.' && !strchr(s, '/') && strlen(s) < 200;
}

static dg_status node_info(dg_node *n)
{
    dg_make_dirs(n->cache);
    struct statvfs vf;
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "protocol", DG_REMOTE_PROTOCOL);
    cJSON_AddStringToObject(o, "version", DG_VERSION);
    cJSON_AddStringToObject(o, "commit", dg_build_commit());
    cJSON_AddStringToObject(o, "backends", dg_build_backends());
    dg_json_add_str(o, "host", host);
    dg_json_add_str(o, "cache", n->cache);
    if (statvfs(n->cache, &vf) == 0)
        cJSON_AddNumberToObject(o, "free_bytes", (double)vf.f_bavail * (double)vf.f_frsize);
    else
        cJSON_AddNullToObject(o, "free_bytes");
    dg_node_answer(n, o);
    return DG_OK;
}

/* have SHA NAME: ok (verified now), missing, or tampered (removed). */
static dg_status node_have(dg_node *n, const char *sha, const char *name)
{
    char *path = dg_asprintf("%s/objects/%s/%s", n->cache, sha, name);
    struct stat sb;
    char hex[65];
    if (!path || stat(path, &sb) != 0) {
        dg_node_state_answer(n, "missing", NULL);
    } else if (dg_sha256_file(n->ctx, path, hex, NULL) == DG_OK && strcmp(hex, sha) == 0) {
        dg_node_state_answer(n, "ok", path);
    } else {
        unlink(path);
        dg_node_state_answer(n, "tampered", NULL);
    }
    dg_free(path);
    return DG_OK;
}

/* The request's input into tmp; the bytes written into *got. */
static dg_status receive(dg_node *n, const char *tmp, long long *got)
{
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0)
        return dg_node_fail(n, dg_node_errno_failure(errno), "node: writing %s: %s", tmp,
                            strerror(errno));
    static _Thread_local char buf[1 << 16];
    ssize_t k;
    dg_status st = DG_OK;
    *got = 0;
    while ((k = read(n->req->in_fd, buf, sizeof buf)) > 0) {
        if (write(fd, buf, (size_t)k) != k) {
            st = dg_node_fail(n, dg_node_errno_failure(errno), "node: writing %s: %s", tmp,
                              strerror(errno));
            break;
        }
        *got += k;
    }
    if (close(fd) != 0 && st == DG_OK)
        st = dg_node_fail(n, dg_node_errno_failure(errno), "node: writing %s: %s", tmp,
                          strerror(errno));
    return st;
}

/* put SHA NAME SIZE: the input into the cache, kept only when it hashes to SHA. */
static dg_status node_put(dg_node *n, const char *sha, const char *name, const char *size)
{
    long long want = atoll(size);
    char *dir = dg_asprintf("%s/objects/%s", n->cache, sha);
    char *tmp = dg_asprintf("%s/.incoming-%ld", dir ? dir : "", (long)getpid());
    char *path = dg_asprintf("%s/%s", dir ? dir : "", name);
    struct statvfs vf;
    dg_status st = DG_OK;
    long long got = 0;
    if (!dir || !tmp || !path || !dg_make_dirs(dir))
        st = dg_node_fail(n, dg_node_errno_failure(errno), "node: cannot create %s: %s",
                          dir ? dir : "cache", strerror(errno));
    else if (statvfs(dir, &vf) == 0 && (double)vf.f_bavail * (double)vf.f_frsize < (double)want)
        st = dg_node_fail(n, DG_REMOTE_DISK, "node: %lld bytes do not fit in %s (%.0f bytes free)",
                          want, n->cache, (double)vf.f_bavail * (double)vf.f_frsize);
    else
        st = receive(n, tmp, &got);
    char hex[65] = "";
    if (st == DG_OK &&
        (dg_sha256_file(n->ctx, tmp, hex, NULL) != DG_OK || strcmp(hex, sha) != 0 || got != want))
        st = dg_node_fail(n, DG_REMOTE_BUCKET,
                          "node: %s arrived with SHA-256 %.16s and %lld bytes, expected %.16s and "
                          "%lld bytes; discarded",
                          name, hex, got, sha, want);
    if (st == DG_OK && rename(tmp, path) != 0)
        st = dg_node_fail(n, DG_REMOTE_USAGE, "node: keeping %s: %s", path, strerror(errno));
    if (st != DG_OK && tmp)
        unlink(tmp);
    else if (st == DG_OK)
        dg_node_state_answer(n, "ok", path);
    dg_free(dir);
    dg_free(tmp);
    dg_free(path);
    return st;
}

/* bucket -- train ARGS: the node's side of the probe: {"bucket": {...}}. */
static dg_status node_bucket(dg_node *n, int argc, const char *const *argv)
{
    if (argc < 1 || strcmp(argv[0], "train") != 0 || argc > DG_REMOTE_MAX_ARGS)
        return dg_node_fail(n, DG_REMOTE_USAGE, "node: bucket: only a train probe");
    const char *args[DG_REMOTE_MAX_ARGS + 2];
    for (int i = 0; i < argc; i++)
        args[i] = argv[i];
    args[argc] = NULL;
    char *out = NULL, err[512];
    int rc = dg_remote_run_self(args, &out, err, sizeof err);
    cJSON *bk = rc == 0 ? dg_remote_bucket_of(out) : NULL;
    dg_free(out);
    if (!bk)
        return dg_node_fail(n, DG_REMOTE_USAGE, "node: the bucket probe failed (exit %d): %s", rc,
                            err[0] ? err : "no record");
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "bucket", bk);
    dg_node_answer(n, o);
    return DG_OK;
}

/* The run's detached parent: runs `SELF --no-ledger --json ARGS` in dir with
 * output to files, then writes its exit status; never returns. */
static void run_detached(const char *self, const char *dir, bool work, int argc,
                         const char *const *argv)
{
    setsid();
    signal(SIGHUP, SIG_IGN);
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0 || fchdir(dfd) != 0)
        _exit(2);
    int in = open("/dev/null", O_RDONLY);
    int out = open("record.json", O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW, 0644);
    int err = open("progress.log", O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW, 0644);
    if (in < 0 || out < 0 || err < 0 || (work && chdir("work") != 0))
        _exit(2);
    dup2(in, 0);
    dup2(out, 1);
    dup2(err, 2);
    const char *args[DG_REMOTE_MAX_ARGS + 6];
    int k = 0;
    args[k++] = self;
    args[k++] = "--no-ledger";
    args[k++] = "--json";
    for (int i = 0; i < argc && k < DG_REMOTE_MAX_ARGS; i++)
        args[k++] = argv[i];
    args[k] = NULL;
    dg_proc_opts o = {.argv = args,
                      .in = {.kind = DG_PROC_INHERIT},
                      .out = {.kind = DG_PROC_INHERIT},
                      .err = {.kind = DG_PROC_INHERIT}};
    dg_proc_result res;
    dg_proc_run(NULL, &o, &res);
    int code = !res.started ? 127 : res.exit_code >= 0 ? res.exit_code : 128 + res.sig;
    dg_proc_result_free(&res);
    int fd = openat(dfd, "exit_status.tmp", O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW, 0644);
    if (fd >= 0) {
        char line[16];
        int len = snprintf(line, sizeof line, "%d\n", code);
        if (write(fd, line, (size_t)len) == len && close(fd) == 0)
            renameat(dfd, "exit_status.tmp", dfd, "exit_status");
    }
    _exit(0);
}

/* Where a link_tree walk goes (nftw passes no pointer through). */
static _Thread_local struct {
    size_t from_len;
    const char *to;
    int err;
} g_link;

static int link_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)ftw;
    char *to = dg_asprintf("%s%s", g_link.to, path + g_link.from_len);
    bool ok = to && (flag == FTW_D          ? mkdir(to, 0755) == 0 || errno == EEXIST
                     : S_ISREG(sb->st_mode) ? link(path, to) == 0
                                            : true);
    g_link.err = ok ? 0 : to ? errno : ENOMEM;
    dg_free(to);
    return ok ? 0 : 1;
}

/* The run's working folder dir/work: the files of tree id linked at their
 * relative paths (the run's own writes land beside them, not in the tree). */
static dg_status link_work(dg_node *n, const char *dir, const char *id)
{
    char *from = dg_asprintf("%s/trees/%s", n->cache, id);
    char *to = dg_asprintf("%s/work", dir);
    struct stat sb;
    dg_status st = DG_OK;
    if (!from || !to || stat(from, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        st = dg_node_fail(n, DG_REMOTE_USAGE, "node: no tree %.16s in the cache for the run", id);
    } else {
        g_link.from_len = strlen(from);
        g_link.to = to;
        g_link.err = 0;
        if (nftw(from, link_entry, 16, FTW_PHYS) != 0)
            st = dg_node_fail(n, dg_node_errno_failure(g_link.err),
                              "node: cannot lay out the run's working folder: %s",
                              strerror(g_link.err ? g_link.err : EIO));
    }
    dg_free(from);
    dg_free(to);
    return st;
}

/* start TOKEN [--work TREE] -- VERB ARGS: runs `devgate --no-ledger --json
 * VERB ARGS` detached from the connection (its own session, no terminal,
 * output to files in CACHE/runs/TOKEN, exit_status there when done), in the
 * folder TREE laid out as runs/TOKEN/work when given, else in runs/TOKEN. */
static dg_status node_start(dg_node *n, const char *token, const char *work, int argc,
                            const char *const *argv)
{
    char *dir = dg_asprintf("%s/runs/%s", n->cache, token);
    char *mpath = dir ? dg_asprintf("%s/run.json", dir) : NULL;
    if (!mpath || !dg_make_dirs(dir)) {
        dg_status st = dg_node_fail(n, dg_node_errno_failure(errno), "node: cannot create %s: %s",
                                    dir ? dir : "run folder", strerror(errno));
        dg_free(dir);
        dg_free(mpath);
        return st;
    }
    /* the run's lock, held by its detached parent while it lives (run_lost),
     * taken before run.json names the run */
    char *lpath = dg_asprintf("%s/" RUN_LOCK, dir);
    int lfd = lpath ? open(lpath, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644) : -1;
    dg_free(lpath);
    if (lfd < 0 || flock(lfd, LOCK_EX | LOCK_NB) != 0) {
        dg_status st =
            dg_node_fail(n, dg_node_errno_failure(errno),
                         "node: cannot hold the run's lock in %s: %s", dir, strerror(errno));
        if (lfd >= 0)
            close(lfd);
        dg_free(dir);
        dg_free(mpath);
        return st;
    }
    cJSON *meta = cJSON_CreateObject();
    dg_json_add_str(meta, "verb", argv[0]);
    cJSON *words = cJSON_AddArrayToObject(meta, "argv");
    for (int i = 0; i < argc; i++)
        cJSON_AddItemToArray(words, dg_json_string(argv[i]));
    char *mtext = dg_json_print(meta);
    cJSON_Delete(meta);
    dg_status st = mtext ? dg_file_write_atomic(n->ctx, mpath, mtext, strlen(mtext)) : DG_ERR_NOMEM;
    dg_string_free(mtext);
    if (st == DG_OK && work && (st = link_work(n, dir, work)) != DG_OK) {
        close(lfd);
        dg_free(dir);
        dg_free(mpath);
        return st;
    }
    char self[4096];
    ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
    pid_t p = -1;
    if (st != DG_OK)
        st = dg_node_fail(n, dg_node_errno_failure(errno), "%s", dg_errmsg(n->ctx));
    else if (sl <= 0)
        st = dg_node_fail(n, DG_REMOTE_USAGE, "node: cannot tell where this devgate is");
    else if ((self[sl] = '\0', p = fork()) < 0)
        st = dg_node_fail(n, DG_REMOTE_USAGE, "node: fork: %s", strerror(errno));
    else if (p == 0)
        run_detached(self, dir, work != NULL, argc, argv);
    close(lfd); /* the detached parent holds its copy */
    if (st == DG_OK)
        n->answer = dg_strdup(token);
    dg_free(dir);
    dg_free(mpath);
    return st;
}

/* True when the run in dir ended without its exit status: its detached
 * parent's lock is free (it was killed, or the node restarted) and no
 * exit_status came before it was released. Status 255 is then written, and
 * a line saying so to its progress log, so that wait ends and fetch answers.
 * False too for a run that keeps no lock (an older devgate's). */
static bool run_lost(dg_node *n, const char *dir)
{
    char *lk = dg_asprintf("%s/" RUN_LOCK, dir), *done = dg_asprintf("%s/exit_status", dir);
    int fd = lk && done ? open(lk, O_RDONLY | O_CLOEXEC | O_NOFOLLOW) : -1;
    /* the lock first: exit_status is renamed into place before it is released */
    bool lost = fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0 && access(done, F_OK) != 0;
    if (fd >= 0)
        close(fd);
    if (lost) {
        static const char line[] = "devgate: the run ended without an exit status (its "
                                   "supervisor was killed or the node restarted)\n";
        char *log = dg_asprintf("%s/progress.log", dir);
        int lf = log ? open(log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644) : -1;
        if (lf >= 0) {
            if (write(lf, line, sizeof line - 1) < 0) {
                /* the status below still ends the wait */
            }
            close(lf);
        }
        dg_free(log);
        dg_file_write_atomic(n->ctx, done, "255\n", 4);
    }
    dg_free(lk);
    dg_free(done);
    return lost;
}

/* wait TOKEN: progress.log through the callback as it grows, until
 * exit_status (or the run is found lost); a run that does not exist, or keeps
 * no lock to tell whether it lives, is refused at once. */
static dg_status node_wait(dg_node *n, const char *token)
{
    char *dir = dg_asprintf("%s/runs/%s", n->cache, token);
    char *meta = dir ? dg_asprintf("%s/run.json", dir) : NULL;
    char *lock = dir ? dg_asprintf("%s/" RUN_LOCK, dir) : NULL;
    dg_status st = DG_OK;
    if (!meta || !lock || access(meta, F_OK) != 0)
        st = dg_node_fail(n, DG_REMOTE_NO_RUN, "node: no run %s in %s", token, n->cache);
    else if (access(lock, F_OK) != 0)
        st = dg_node_fail(n, DG_REMOTE_USAGE,
                          "node: run %s keeps no lock (an older devgate started it): collect it "
                          "when it is done",
                          token);
    dg_free(meta);
    dg_free(lock);
    if (st != DG_OK) {
        dg_free(dir);
        return st;
    }
    char *log = dg_asprintf("%s/progress.log", dir);
    char *done = dg_asprintf("%s/exit_status", dir);
    off_t pos = 0;
    bool finished = false;
    while (log && done && !finished) {
        finished = run_lost(n, dir) || access(done, F_OK) == 0;
        int fd = open(log, O_RDONLY | O_CLOEXEC);
        char buf[8192];
        ssize_t k;
        while (fd >= 0 && (k = pread(fd, buf, sizeof buf, pos)) > 0) {
            if (n->req->progress)
                n->req->progress(DG_REMOTE_STREAM, buf, (size_t)k, n->req->user);
            pos += k;
        }
        if (fd >= 0)
            close(fd);
        struct timespec ts = {0, 200 * 1000 * 1000};
        if (!finished)
            nanosleep(&ts, NULL);
    }
    dg_free(log);
    dg_free(done);
    dg_free(dir);
    return finished ? DG_OK : dg_node_fail(n, DG_REMOTE_USAGE, "node: out of memory");
}

/* The finished run in dir: exit status, record, the tail of its stderr. */
static void fetch_finished(cJSON *o, const char *dir, const char *code)
{
    cJSON_AddNumberToObject(o, "exit_status", atoi(code));
    char *p = dg_asprintf("%s/record.json", dir);
    char *rec = p ? dg_read_file(p, DG_REMOTE_ANSWER_MAX, NULL) : NULL;
    cJSON *r = rec ? cJSON_Parse(rec) : NULL;
    dg_free(rec);
    dg_free(p);
    if (r)
        cJSON_AddItemToObject(o, "record", r);
    p = dg_asprintf("%s/progress.log", dir);
    int fd = p ? open(p, O_RDONLY | O_CLOEXEC) : -1;
    char tail[2001] = "";
    if (fd >= 0) {
        off_t end = lseek(fd, 0, SEEK_END);
        ssize_t k = pread(fd, tail, sizeof tail - 1, end > 2000 ? end - 2000 : 0);
        tail[k > 0 ? k : 0] = '\0';
        close(fd);
    }
    dg_free(p);
    dg_json_add_str(o, "stderr_tail", tail);
}

/* fetch TOKEN: {"token", "verb", "exit_status", "record", "node", ...} or
 * {"running": true}. */
static dg_status node_fetch(dg_node *n, const char *token)
{
    char *dir = dg_asprintf("%s/runs/%s", n->cache, token);
    char *p = dir ? dg_asprintf("%s/run.json", dir) : NULL;
    char *meta = p ? dg_read_file(p, 1 << 20, NULL) : NULL;
    dg_free(p);
    if (!meta) {
        dg_free(dir);
        return dg_node_fail(n, DG_REMOTE_NO_RUN, "node: no run %s in %s", token, n->cache);
    }
    cJSON *o = cJSON_Parse(meta);
    dg_free(meta);
    if (!cJSON_IsObject(o)) {
        cJSON_Delete(o);
        o = cJSON_CreateObject();
    }
    cJSON_AddStringToObject(o, "token", token);
    run_lost(n, dir);
    p = dg_asprintf("%s/exit_status", dir);
    char *code = p ? dg_read_file(p, 64, NULL) : NULL;
    dg_free(p);
    if (!code)
        cJSON_AddBoolToObject(o, "running", true);
    else
        fetch_finished(o, dir, code);
    dg_free(code);
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    cJSON *node = cJSON_AddObjectToObject(o, "node");
    dg_json_add_str(node, "host", host);
    cJSON_AddStringToObject(node, "version", DG_VERSION);
    cJSON_AddStringToObject(node, "commit", dg_build_commit());
    dg_node_answer(n, o);
    dg_free(dir);
    return DG_OK;
}

/* list: finished runs not yet collected, oldest first (tokens sort by time). */
static dg_status node_list(dg_node *n)
{
    char *runs = dg_asprintf("%s/runs", n->cache);
    cJSON *arr = cJSON_CreateArray();
    struct dirent **names = NULL;
    int k = runs ? scandir(runs, &names, NULL, alphasort) : -1;
    for (int i = 0; i < k; i++) {
        const char *t = names[i]->d_name;
        char *done = dg_asprintf("%s/%s/exit_status", runs, t);
        char *mark = dg_asprintf("%s/%s/collected", runs, t);
        if (dg_remote_token_ok(t) && done && mark && access(done, F_OK) == 0 &&
            access(mark, F_OK) != 0)
            cJSON_AddItemToArray(arr, cJSON_CreateString(t));
        dg_free(done);
        dg_free(mark);
        free(names[i]);
    }
    free(names);
    dg_free(runs);
    dg_node_answer(n, arr);
    return DG_OK;
}

static dg_status node_mark(dg_node *n, const char *token)
{
    char *p = dg_asprintf("%s/runs/%s/collected", n->cache, token);
    int fd = p ? open(p, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644) : -1;
    dg_status st = fd >= 0 ? DG_OK
                           : dg_node_fail(n, DG_REMOTE_USAGE, "node: cannot mark run %s: %s", token,
                                          strerror(errno));
    if (fd >= 0)
        close(fd);
    dg_free(p);
    return st;
}

static dg_status node_argv(dg_node *n, int argc, const char *const *argv)
{
    cJSON *a = cJSON_CreateArray();
    for (int k = 0; k < argc; k++)
        cJSON_AddItemToArray(a, cJSON_CreateString(argv[k]));
    char *s = cJSON_Print(a); /* indented: the words read one a line */
    n->answer = s ? dg_strdup(s) : NULL;
    cJSON_free(s);
    cJSON_Delete(a);
    return DG_OK;
}

/* The cache folder: given, else $XDG_CACHE_HOME/devgate, else ~/.cache/devgate. */
static char *cache_dir(const char *given)
{
    if (given)
        return dg_strdup(given);
    const char *x = getenv("XDG_CACHE_HOME");
    if (x && x[0] == '/')
        return dg_asprintf("%s/devgate", x);
    const char *h = getenv("HOME");
    return dg_asprintf("%s/.cache/devgate", h && h[0] ? h : "/tmp");
}

/* One request, its words checked before anything is touched. */
static dg_status node_dispatch(dg_node *n, const char *sub, int left, const char *const *rest)
{
    if (strcmp(sub, "info") == 0)
        return node_info(n);
    if (strcmp(sub, "argv") == 0)
        return node_argv(n, left, rest);
    if (strcmp(sub, "have") == 0 && left == 2 && hex64(rest[0]) && plain_name(rest[1]))
        return node_have(n, rest[0], rest[1]);
    if (strcmp(sub, "bucket") == 0 && left >= 2 && strcmp(rest[0], "--") == 0)
        return node_bucket(n, left - 1, rest + 1);
    if (strcmp(sub, "tree") == 0 && left == 1 && hex64(rest[0]))
        return dg_node_tree(n, rest[0]);
    if (strcmp(sub, "put") == 0 && left == 3 && hex64(rest[0]) && plain_name(rest[1]))
        return node_put(n, rest[0], rest[1], rest[2]);
    if (strcmp(sub, "start") == 0 && left >= 3 && dg_remote_token_ok(rest[0]) &&
        strcmp(rest[1], "--") == 0)
        return node_start(n, rest[0], NULL, left - 2, rest + 2);
    if (strcmp(sub, "start") == 0 && left >= 5 && dg_remote_token_ok(rest[0]) &&
        strcmp(rest[1], "--work") == 0 && hex64(rest[2]) && strcmp(rest[3], "--") == 0)
        return node_start(n, rest[0], rest[2], left - 4, rest + 4);
    if (strcmp(sub, "wait") == 0 && left == 1 && dg_remote_token_ok(rest[0]))
        return node_wait(n, rest[0]);
    if (strcmp(sub, "fetch") == 0 && left == 1 && dg_remote_token_ok(rest[0]))
        return node_fetch(n, rest[0]);
    if (strcmp(sub, "list") == 0 && left == 0)
        return node_list(n);
    if (strcmp(sub, "mark") == 0 && left == 1 && dg_remote_token_ok(rest[0]))
        return node_mark(n, rest[0]);
    char shown[64];
    dg_copy_clean(shown, sizeof shown, sub);
    return dg_node_fail(n, DG_REMOTE_USAGE, "__node: bad request '%s'", shown);
}

dg_status dg_remote_node(dg_ctx *ctx, const dg_remote_node_req *req, char **answer,
                         dg_remote_failure *failure)
{
    *answer = NULL;
    *failure = DG_REMOTE_OK;
    dg_node n = {.ctx = ctx, .req = req};
    if (req->argc < 1) {
        *failure = DG_REMOTE_USAGE;
        return dg_fail(ctx, DG_ERR_USAGE, "__node: which request?");
    }
    char *cache = cache_dir(req->cache);
    if (!cache) {
        *failure = DG_REMOTE_USAGE;
        return dg_fail(ctx, DG_ERR_NOMEM, "node: out of memory");
    }
    n.cache = cache;
    dg_status st = node_dispatch(&n, req->argv[0], req->argc - 1, req->argv + 1);
    dg_free(cache);
    *failure = n.failure;
    if (st != DG_OK) {
        dg_free(n.answer);
        return st;
    }
    *answer = n.answer;
    return DG_OK;
}
