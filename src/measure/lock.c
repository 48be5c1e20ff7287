/* The machine-wide measurement lock (docs/measure.md, "Measurement lock"):
 * an flock on one file that every devgate measurement on the host takes
 * around its timed windows, so two measurements wait for each other instead
 * of spoiling each other. The file is $DEVGATE_MEASURE_LOCK when set, else
 * devgate-measure.lock in $XDG_RUNTIME_DIR, else in /tmp. Nested takes in one
 * process count instead of locking again (flock on a second descriptor of the
 * same file would wait for ourselves). A measurement that waits holds
 * "LOCKFILE.want" shared while it waits; one that is about to take the lock
 * again right after releasing it (the next soak epoch, compare repetition or
 * sweep trial) first lets such a waiter in, so two measurements take turns
 * instead of the releasing one winning every race. */
#include "measure/measure.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t lock_mu = PTHREAD_MUTEX_INITIALIZER;
static int lock_depth, lock_fd = -1;

void dg_measure_lock_path(char *buf, size_t len)
{
    const char *env = getenv("DEVGATE_MEASURE_LOCK");
    const char *rt = getenv("XDG_RUNTIME_DIR");
    if (env && *env)
        snprintf(buf, len, "%s", env);
    else if (rt && *rt && access(rt, W_OK | X_OK) == 0)
        snprintf(buf, len, "%s/devgate-measure.lock", rt);
    else
        snprintf(buf, len, "/tmp/devgate-measure.lock");
}

static void nap_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* Longest a taker gives way to waiters before it queues like them: a waiter
 * polls every 50 ms, so one that is alive takes the lock well within this. */
#define GIVE_WAY_MAX_S 0.5

/* While another measurement waits (holds the want file shared, so an exclusive
 * probe fails), let it take the lock first: wait until no one is waiting any
 * more or GIVE_WAY_MAX_S has passed. */
static void give_way(int wfd, const volatile sig_atomic_t *cancel)
{
    double t0 = dg_now();
    while (flock(wfd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK) {
        if ((cancel && *cancel) || dg_now() - t0 >= GIVE_WAY_MAX_S)
            return;
        nap_ms(10);
    }
    flock(wfd, LOCK_UN);
}

/* The pid holding an flock on the file behind fd, from /proc/locks; 0 when
 * none is listed (or /proc is not there). */
static pid_t flock_holder(int fd)
{
    struct stat st;
    if (fstat(fd, &st) != 0)
        return 0;
    FILE *f = fopen("/proc/locks", "re");
    if (!f)
        return 0;
    char line[256];
    pid_t holder = 0;
    while (!holder && fgets(line, sizeof line, f)) {
        /* "1: FLOCK  ADVISORY  WRITE 4711 fd:01:1234 0 EOF" (a blocked
         * waiter's line has "->" after the number and is not a holder). */
        char kind[16], mode[16], rw[16];
        long pid;
        unsigned maj, min;
        unsigned long long ino;
        if (strstr(line, "->"))
            continue;
        if (sscanf(line, "%*d: %15s %15s %15s %ld %x:%x:%llu", kind, mode, rw, &pid, &maj, &min,
                   &ino) == 7 &&
            strcmp(kind, "FLOCK") == 0 && maj == major(st.st_dev) && min == minor(st.st_dev) &&
            ino == (unsigned long long)st.st_ino)
            holder = (pid_t)pid;
    }
    fclose(f);
    return holder;
}

/* Whether pid is one of our ancestors (parent, grandparent, ...). */
static bool is_ancestor(pid_t pid)
{
    pid_t p = getppid();
    for (int depth = 0; p > 1 && depth < 64; depth++) {
        if (p == pid)
            return true;
        char path[64], buf[512];
        snprintf(path, sizeof path, "/proc/%ld/stat", (long)p);
        FILE *f = fopen(path, "re");
        if (!f)
            return false;
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = '\0';
        /* "pid (comm) state ppid ...": comm may hold spaces and parentheses. */
        const char *rp = strrchr(buf, ')');
        long ppid;
        if (!rp || sscanf(rp + 1, " %*c %ld", &ppid) != 1)
            return false;
        p = (pid_t)ppid;
    }
    return false;
}

void dg_measure_lock(dg_mlock *l, double max_wait_s, const volatile sig_atomic_t *cancel)
{
    memset(l, 0, sizeof *l);
    dg_measure_lock_path(l->path, sizeof l->path);
    double t0 = dg_now();
    pthread_mutex_lock(&lock_mu);
    if (lock_depth > 0) {
        lock_depth++;
        l->held = true;
        l->nested = true;
        l->state = "held";
        pthread_mutex_unlock(&lock_mu);
        return;
    }
    int fd = open(l->path, O_RDONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0666);
    if (fd < 0) {
        pthread_mutex_unlock(&lock_mu);
        snprintf(l->error, sizeof l->error, "%s", strerror(errno));
        l->state = "unavailable";
        return;
    }
    (void)fchmod(fd, 0666); /* another user's measurement must be able to open it */
    char want[sizeof l->path + 8];
    snprintf(want, sizeof want, "%s.want", l->path);
    int wfd = open(want, O_RDONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0666);
    if (wfd >= 0) {
        (void)fchmod(wfd, 0666);
        give_way(wfd, cancel);
    }
    bool waiting = false;
    l->state = "held";
    for (;;) {
        if (flock(fd, LOCK_EX | LOCK_NB) == 0)
            break;
        if (errno != EWOULDBLOCK && errno != EINTR) {
            snprintf(l->error, sizeof l->error, "%s", strerror(errno));
            l->state = "unavailable";
            break;
        }
        /* A devgate run by the program another devgate measures (a script
         * that calls devgate, a nested run) is part of that measurement:
         * waiting for our own ancestor would only stall it. */
        if (!l->contended && is_ancestor(flock_holder(fd))) {
            l->state = "held by an ancestor";
            l->nested = true;
            break;
        }
        l->contended = true;
        /* Say we wait (a holder probing with LOCK_EX can make this miss once:
         * the next poll tries again). */
        if (wfd >= 0 && !waiting)
            waiting = flock(wfd, LOCK_SH | LOCK_NB) == 0;
        if (cancel && *cancel) {
            l->state = "interrupted";
            break;
        }
        if (dg_now() - t0 >= max_wait_s) {
            l->state = "timed out";
            break;
        }
        nap_ms(50);
    }
    if (wfd >= 0)
        close(wfd); /* drops our "waiting" mark */
    l->waited_s = dg_now() - t0;
    if (strcmp(l->state, "held") == 0) {
        lock_fd = fd;
        lock_depth = 1;
        l->held = true;
    } else {
        close(fd);
    }
    pthread_mutex_unlock(&lock_mu);
}

void dg_measure_unlock(dg_mlock *l)
{
    if (!l || !l->held)
        return;
    pthread_mutex_lock(&lock_mu);
    if (lock_depth > 0 && --lock_depth == 0 && lock_fd >= 0) {
        flock(lock_fd, LOCK_UN);
        close(lock_fd);
        lock_fd = -1;
    }
    pthread_mutex_unlock(&lock_mu);
    l->held = false;
}

cJSON *dg_measure_lock_json(const dg_mlock *l)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    cJSON_AddStringToObject(o, "state", l->state ? l->state : "not taken");
    cJSON_AddItemToObject(o, "waited", dg_json_metric(l->waited_s, l->state != NULL, "s"));
    cJSON_AddBoolToObject(o, "contended", l->contended);
    if (l->error[0])
        cJSON_AddStringToObject(o, "error", l->error);
    return o;
}
