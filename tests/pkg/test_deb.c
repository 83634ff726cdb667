/*
 * The Debian package (packaging/packaging.cmake): cpack builds
 * kvd_<version>_<arch>.deb from this build tree; it is unpacked into a temporary root with
 * `dpkg-deb -x` (never installed on the machine) and checked:
 *   - control: name, version, Depends covering every library kvd and kvctl load (ldd, each
 *     library's package from `dpkg -S`), maintainer scripts (kvd user, /var/lib/kvd), conffile;
 *   - files: kvd, kvctl, libkvclient + header + kvclient.pc, kvd.service, /etc/default/kvd;
 *   - <root>/usr/bin/kvd --version and kvctl version print the package version;
 *   - kvd.service: `systemd-analyze verify` when available, and a textual check;
 *   - the unpacked kvd started as the unit starts it (environment file, $KVD_OPTS,
 *     NOTIFY_SOCKET) reports READY=1, serves the unpacked kvctl, and STOPPING=1 on SIGTERM.
 */
#include "kvt_proc.h"
#include "kvt_util.h"

#include <criterion/criterion.h>
#include "kvt_skip.h"
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

/* Runs a shell command line; returns the result (caller frees). */
static kvt_cmd_result sh(uint32_t timeout_ms, const char *const *env, const char *fmt, ...)
{
    char cmd[16384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    const char *argv[] = {"/bin/sh", "-c", cmd, NULL};
    kvt_cmd_result r;
    cr_assert_eq(kvt_run(argv, env, NULL, 0, timeout_ms, &r), 0, "run: %s", cmd);
    cr_assert_not(r.timed_out, "timed out: %s", cmd);
    return r;
}

/* sh() expecting exit 0; returns stdout (caller frees). */
static char *sh_ok(uint32_t timeout_ms, const char *fmt, ...)
{
    char cmd[16384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    kvt_cmd_result r = sh(timeout_ms, NULL, "%s", cmd);
    cr_assert_eq(r.exit_code, 0, "`%s` exited %d:\n%s%s", cmd, r.exit_code, r.out, r.err);
    char *out = strdup(r.out);
    kvt_cmd_result_free(&r);
    return out;
}

static int has_tool(const char *name)
{
    kvt_cmd_result r = sh(10000, NULL, "command -v %s", name);
    int ok = r.exit_code == 0;
    kvt_cmd_result_free(&r);
    return ok;
}

static void chomp(char *s)
{
    size_t n = strlen(s);
    while (n && (s[n - 1] == '\n' || s[n - 1] == ' '))
        s[--n] = '\0';
}

/* 1 if the comma-separated Depends list names package pkg. */
static int depends_on(const char *depends, const char *pkg)
{
    size_t l = strlen(pkg);
    for (const char *p = depends; (p = strstr(p, pkg)) != NULL; p += l) {
        int start = p == depends || p[-1] == ' ' || p[-1] == ',';
        int end = p[l] == '\0' || p[l] == ' ' || p[l] == ',';
        if (start && end)
            return 1;
    }
    return 0;
}

static int bind_dgram(const char *path)
{
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    cr_assert_geq(fd, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    cr_assert_lt(strlen(path), sizeof(sa.sun_path));
    memcpy(sa.sun_path, path, strlen(path));
    cr_assert_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0, "bind %s", path);
    return fd;
}

static int recv_within(int fd, char *buf, size_t cap, int timeout_ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, timeout_ms) != 1)
        return -1;
    ssize_t n = recv(fd, buf, cap - 1, 0);
    cr_assert_geq(n, 0);
    buf[n] = '\0';
    return (int)n;
}

static void check_depends(const char *root, const char *bin, const char *depends)
{
    /* the libraries the binary loads on this (Debian) machine, and their packages */
    char *pkgs = sh_ok(30000,
                       "ldd '%s%s' | awk '$3 ~ /^\\// {print $3} $1 ~ /^\\// {print $1}' | "
                       "while read -r l; do dpkg -S \"$(readlink -f \"$l\")\" 2>/dev/null || "
                       "dpkg -S \"$l\"; done | cut -d: -f1 | sort -u",
                       root, bin);
    size_t n = 0;
    for (char *save = NULL, *p = strtok_r(pkgs, "\n", &save); p; p = strtok_r(NULL, "\n", &save)) {
        cr_expect(depends_on(depends, p), "%s loads a library of package %s, not in Depends: %s",
                  bin, p, depends);
        n++;
    }
    cr_expect_geq(n, 4, "%s: found only %zu library packages", bin, n);
    free(pkgs);
}

Test(pkg_deb, cpack_builds_a_deb_that_unpacks_and_runs, .timeout = 600)
{
    if (!has_tool("dpkg-deb") || !has_tool("dpkg"))
        KVT_SKIP_MISSING("dpkg-deb not available (not a Debian system)");
    const char *b = getenv("KV_BUILD_DIR");
    cr_assert(b && *b);
    kvt_tmpdir t;
    cr_assert_eq(kvt_tmpdir_create(&t, "kvd-deb"), 0);

    /* 1. the package, built from this tree */
    char *arch = sh_ok(10000, "dpkg --print-architecture");
    chomp(arch);
    char *out = sh_ok(540000, "cd '%s' && '%s' -G DEB -B '%s/out' --config CPackConfig.cmake", b,
                      KV_CPACK, t.path);
    free(out);
    char deb[PATH_MAX + 128];
    snprintf(deb, sizeof(deb), "%s/out/kvd_%s_%s.deb", t.path, KV_PROJECT_VERSION, arch);
    cr_assert_eq(access(deb, R_OK), 0, "no %s", deb);

    /* 2. control fields */
    char *pkg = sh_ok(10000, "dpkg-deb -f '%s' Package", deb);
    chomp(pkg);
    cr_expect_str_eq(pkg, "kvd");
    char *ver = sh_ok(10000, "dpkg-deb -f '%s' Version", deb);
    chomp(ver);
    cr_expect_str_eq(ver, KV_PROJECT_VERSION);
    char *depends = sh_ok(10000, "dpkg-deb -f '%s' Depends", deb);
    chomp(depends);
    static const char *const need[] = {"libuv1",   "libprotobuf-c1", "libssl3",
                                       "liblmdb0", "libnghttp2-14",  "adduser"};
    for (size_t i = 0; i < sizeof(need) / sizeof(need[0]); i++)
        cr_expect(depends_on(depends, need[i]), "Depends lacks %s: %s", need[i], depends);

    /* 3. maintainer scripts and conffiles */
    char *ctl = sh_ok(30000, "dpkg-deb -e '%s' '%s/ctl' && ls '%s/ctl'", deb, t.path, t.path);
    cr_expect(strstr(ctl, "postinst") && strstr(ctl, "prerm") && strstr(ctl, "postrm") &&
                  strstr(ctl, "conffiles"),
              "control members: %s", ctl);
    char *post = sh_ok(10000,
                       "test -x '%s/ctl/postinst' && sh -n '%s/ctl/postinst' && "
                       "cat '%s/ctl/postinst'",
                       t.path, t.path, t.path);
    cr_expect(strstr(post, "adduser") && strstr(post, "--system") && strstr(post, " kvd"),
              "postinst creates no kvd system user:\n%s", post);
    cr_expect(strstr(post, "/var/lib/kvd"), "postinst does not create /var/lib/kvd");
    char *conf = sh_ok(10000, "cat '%s/ctl/conffiles'", t.path);
    cr_expect(strstr(conf, "/etc/default/kvd\n") != NULL, "conffiles: %s", conf);

    /* 4. the files, unpacked into a temporary root */
    char root[PATH_MAX + 16];
    snprintf(root, sizeof(root), "%s/root", t.path);
    free(sh_ok(60000, "dpkg-deb -x '%s' '%s'", deb, root));
    static const char *const files[] = {"/usr/bin/kvd", "/usr/bin/kvctl", "/usr/include/kvclient.h",
                                        "/usr/lib/systemd/system/kvd.service", "/etc/default/kvd"};
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        char p[PATH_MAX + 128];
        snprintf(p, sizeof(p), "%s%s", root, files[i]);
        cr_expect_eq(access(p, R_OK), 0, "package lacks %s", files[i]);
    }
    char *libs = sh_ok(10000,
                       "cd '%s' && find usr -name 'libkvclient.so*' -o -name kvclient.pc "
                       "| sort",
                       root);
    cr_expect(strstr(libs, "libkvclient.so.0") && strstr(libs, "pkgconfig/kvclient.pc"),
              "libkvclient files: %s", libs);

    /* 5. the unpacked binaries run (libraries from the system, as the package Depends) */
    char *v = sh_ok(30000, "'%s/usr/bin/kvd' --version", root);
    char want[128];
    snprintf(want, sizeof(want), "kvd %s (etcd v3 API 3.4)\n", KV_PROJECT_VERSION);
    cr_expect_str_eq(v, want);
    char *cv = sh_ok(30000, "'%s/usr/bin/kvctl' version", root);
    snprintf(want, sizeof(want), "kvctl version: %s\nAPI version: 3.4\n", KV_PROJECT_VERSION);
    cr_expect_str_eq(cv, want);
    if (KV_SANITIZED[0] == '\0') {
        check_depends(root, "/usr/bin/kvd", depends);
        check_depends(root, "/usr/bin/kvctl", depends);
    } else {
        /* a sanitizer build loads the sanitizer runtimes (libasan, libubsan and what they
         * load), which are no dependency of the package: checked in the release build */
        cr_log_info("sanitizer build (%s): Depends vs ldd not checked", KV_SANITIZED);
    }

    /* 6. the unit */
    char *unit = sh_ok(10000, "cat '%s/usr/lib/systemd/system/kvd.service'", root);
    static const char *const lines[] = {"\n[Service]\n",
                                        "\nType=notify\n",
                                        "\nUser=kvd\n",
                                        "\nEnvironmentFile=-/etc/default/kvd\n",
                                        "\nExecStart=/usr/bin/kvd $KVD_OPTS\n",
                                        "\n[Install]\n",
                                        "\nWantedBy=multi-user.target\n"};
    for (size_t i = 0; i < sizeof(lines) / sizeof(lines[0]); i++)
        cr_expect(strstr(unit, lines[i]) != NULL, "kvd.service lacks %s", lines[i] + 1);
    if (has_tool("systemd-analyze") &&
        access("/usr/lib/systemd/system/sysinit.target", R_OK) == 0) {
        /* the unpacked root holds the package alone: systemd's own units that every service
         * depends on by default (sysinit.target, basic.target, shutdown.target, the slices)
         * come from this system, as on a machine the package is installed on */
        free(sh_ok(30000,
                   "cp -n /usr/lib/systemd/system/*.target /usr/lib/systemd/system/*.slice "
                   "'%s/usr/lib/systemd/system/'",
                   root));
        kvt_cmd_result r = sh(60000, NULL,
                              "SYSTEMD_LOG_LEVEL=warning systemd-analyze verify --root='%s' "
                              "--man=no kvd.service",
                              root);
        cr_expect_eq(r.exit_code, 0, "systemd-analyze verify:\n%s%s", r.out, r.err);
        cr_expect(strstr(r.err, "kvd.service") == NULL, "systemd-analyze warns:\n%s", r.err);
        kvt_cmd_result_free(&r);
    } else {
        cr_log_info("systemd-analyze or systemd's units not available: textual check only");
    }

    /* 7. started as the unit starts it: the environment file, $KVD_OPTS (flags win: test
     * ports and data dir), NOTIFY_SOCKET */
    char sock[PATH_MAX + 16], data[PATH_MAX + 16], log[PATH_MAX + 16], env[PATH_MAX + 32];
    snprintf(sock, sizeof(sock), "%s/notify", t.path);
    snprintf(data, sizeof(data), "%s/data", t.path);
    snprintf(log, sizeof(log), "%s/kvd.log", t.path);
    snprintf(env, sizeof(env), "NOTIFY_SOCKET=%s", sock);
    int fd = bind_dgram(sock);
    uint16_t cport, pport;
    cr_assert_eq(kvt_port_free(&cport), 0);
    cr_assert_eq(kvt_port_free(&pport), 0);
    char script[16384];
    snprintf(script, sizeof(script),
             "set -a; . '%s/etc/default/kvd'; set +a; "
             "KVD_OPTS=\"--data-dir=%s --listen-client-urls=http://127.0.0.1:%u "
             "--advertise-client-urls=http://127.0.0.1:%u "
             "--listen-peer-urls=http://127.0.0.1:%u\"; exec '%s/usr/bin/kvd' $KVD_OPTS",
             root, data, cport, cport, pport, root);
    const char *argv[] = {"/bin/sh", "-c", script, NULL};
    const char *envs[] = {env, NULL};
    kvt_proc p;
    kvt_proc_init(&p, log);
    cr_assert_eq(kvt_proc_spawn_env(&p, argv, envs), 0);
    char buf[256];
    cr_assert_gt(recv_within(fd, buf, sizeof(buf), 60000), 0, "no READY=1 (log %s)", log);
    cr_expect(strncmp(buf, "READY=1", 7) == 0, "got %s", buf);
    char *got = sh_ok(30000,
                      "K='%s/usr/bin/kvctl --endpoints=127.0.0.1:%u'; $K put pkg-key v1 && "
                      "$K get pkg-key && $K member list",
                      root, cport);
    cr_expect(strncmp(got, "OK\npkg-key\nv1\n", 14) == 0, "kvctl against the unpacked kvd: %s",
              got);
    /* KVD_NAME from the environment file names the member */
    cr_expect(strstr(got, ", default, ") != NULL, "member name from KVD_NAME: %s", got);
    cr_assert_eq(kvt_proc_signal(&p, SIGTERM), 0);
    cr_assert_gt(recv_within(fd, buf, sizeof(buf), 30000), 0, "no STOPPING=1");
    cr_expect_str_eq(buf, "STOPPING=1");
    cr_expect_eq(kvt_proc_wait(&p, 30000), 0);
    kvt_proc_kill9(&p);
    close(fd);

    free(got);
    free(unit);
    free(v);
    free(cv);
    free(libs);
    free(conf);
    free(post);
    free(ctl);
    free(depends);
    free(ver);
    free(pkg);
    free(arch);
    kvt_tmpdir_destroy(&t);
}
