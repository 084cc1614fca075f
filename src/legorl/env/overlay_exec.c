/* The trial half of overlay_helper.py in C: every exec of a trial over an image layer starts here, and a
 * Python interpreter cost ~12 ms of CPU per exec (~20% of a look-act rollout's sandbox CPU).
 *
 *   legorl-overlay --ro DIR=LOWER[:LOWER...] ... --uid N --gid N -- CMD ARGS...
 *
 * In a private mount namespace: mounts each DIR as a read-only overlay of its LOWERs, drops every group and
 * sets uid/gid to N, then execs CMD (bubblewrap). Same arguments, same steps, same exit code 125 with a
 * "legorl overlay: ..." line on failure as the Python helper; its `--build` mode stays in Python. */
#define _GNU_SOURCE
#include <errno.h>
#include <grp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <unistd.h>

#define MAX_RO 64

static void die(const char *what, const char *arg) {
    const char *why = strerror(errno);
    fprintf(stderr, "legorl overlay: %s%s: %s\n", what, arg ? arg : "", why);
    _exit(125);
}

static long id_arg(const char *s) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || end == s || v < 0) {
        errno = EINVAL;
        die("not an id: ", s);
    }
    return v;
}

int main(int argc, char **argv) {
    char *ro[MAX_RO];
    int n_ro = 0, i = 1;
    long uid = -1, gid = -1;
    for (; i < argc && strcmp(argv[i], "--") != 0; i += 2) {
        if (i + 1 >= argc || strcmp(argv[i + 1], "--") == 0) {
            errno = EINVAL;
            die("no value for ", argv[i]);
        }
        if (strcmp(argv[i], "--ro") == 0) {
            if (n_ro == MAX_RO) {
                errno = E2BIG;
                die("too many --ro", NULL);
            }
            ro[n_ro++] = argv[i + 1];
        } else if (strcmp(argv[i], "--uid") == 0) {
            uid = id_arg(argv[i + 1]);
        } else if (strcmp(argv[i], "--gid") == 0) {
            gid = id_arg(argv[i + 1]);
        } else {
            errno = EINVAL;
            die("unknown option ", argv[i]);
        }
    }
    if (i + 1 >= argc || uid < 0 || gid < 0) {
        errno = EINVAL;
        die("usage: --ro DIR=LOWERS ... --uid N --gid N -- CMD ...", NULL);
    }
    if (unshare(CLONE_NEWNS) != 0) die("unshare(mount)", NULL);
    if (mount("none", "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) die("mount none on /", NULL);
    for (int r = 0; r < n_ro; r++) {
        char *eq = strchr(ro[r], '=');
        char data[8192];
        if (eq == NULL) {
            errno = EINVAL;
            die("--ro wants DIR=LOWERS, got ", ro[r]);
        }
        *eq = '\0';
        if (snprintf(data, sizeof data, "lowerdir=%s", eq + 1) >= (int)sizeof data) {
            errno = ENAMETOOLONG;
            die("lowerdir of ", ro[r]);
        }
        if (mount("overlay", ro[r], "overlay", MS_RDONLY, data) != 0) die("mount overlay on ", ro[r]);
    }
    if (setgroups(0, NULL) != 0) die("setgroups", NULL);
    if (setresgid((gid_t)gid, (gid_t)gid, (gid_t)gid) != 0) die("setresgid", NULL);
    if (setresuid((uid_t)uid, (uid_t)uid, (uid_t)uid) != 0) die("setresuid", NULL);
    execv(argv[i + 1], argv + i + 1);
    die("exec ", argv[i + 1]);
    return 125;
}
