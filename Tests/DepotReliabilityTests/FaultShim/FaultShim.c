// An LD_PRELOAD shim for fault-injection tests. LMDBFaultInjectionTests compiles it with
// the C compiler into libDepotFaultShim.so when it runs, so that a test-only library is no
// product of the package. It has no API: it replaces write, pwrite, pwritev, writev, fsync
// and fdatasync in the process it is preloaded into, and reads its settings from the
// environment:
//
//   DEPOT_FAULT_FILE   the full path of the one file whose calls may fail (required)
//   DEPOT_FAULT_AFTER  how many write or sync calls on that file succeed first (0)
//   DEPOT_FAULT_TIMES  how many calls then fail before the disk works again (1)
//   DEPOT_FAULT_ERRNO  the errno the failing calls set: 5 (EIO, default) or 28 (ENOSPC)
//
// Every other file, and every process without DEPOT_FAULT_FILE, is passed straight
// through to the C library.

#define _GNU_SOURCE

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

// Settings are read once, before main, while the process has one thread; afterwards
// they are only read. The call counter and the failures left are atomics, since the
// store writes from threads of its own.
static const char *fault_file;
static long fault_after;
static int fault_errno = EIO;
static atomic_long calls;
static atomic_long failures_left;

__attribute__((constructor)) static void read_settings(void) {
    fault_file = getenv("DEPOT_FAULT_FILE");
    const char *after = getenv("DEPOT_FAULT_AFTER");
    const char *times = getenv("DEPOT_FAULT_TIMES");
    const char *number = getenv("DEPOT_FAULT_ERRNO");
    fault_after = after != NULL ? atol(after) : 0;
    atomic_store(&failures_left, times != NULL ? atol(times) : 1);
    if (number != NULL) fault_errno = atoi(number);
}

/// Whether this call on `fd` fails; sets errno when it does.
static int should_fail(int fd) {
    if (fault_file == NULL || atomic_load(&failures_left) <= 0) return 0;
    char link[64];
    char target[PATH_MAX];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t length = readlink(link, target, sizeof target - 1);
    if (length < 0) return 0;
    target[length] = 0;
    if (strcmp(target, fault_file) != 0) return 0;
    if (atomic_fetch_add(&calls, 1) < fault_after) return 0;
    // Only as many callers as failures are left fail, even when they race.
    if (atomic_fetch_sub(&failures_left, 1) <= 0) return 0;
    errno = fault_errno;
    return 1;
}

// The C library's functions, looked up in the constructor, while the process has one
// thread (a call that comes before it, from another library's constructor, looks its
// function up itself, still single-threaded).
static __typeof__(write) *next_write;
static __typeof__(pwrite) *next_pwrite;
static __typeof__(pwrite64) *next_pwrite64;
static __typeof__(writev) *next_writev;
static __typeof__(pwritev) *next_pwritev;
static __typeof__(fsync) *next_fsync;
static __typeof__(fdatasync) *next_fdatasync;

#define NEXT(name) \
    if (next_##name == NULL) next_##name = (__typeof__(name) *)dlsym(RTLD_NEXT, #name)

__attribute__((constructor)) static void find_next(void) {
    NEXT(write);
    NEXT(pwrite);
    NEXT(pwrite64);
    NEXT(writev);
    NEXT(pwritev);
    NEXT(fsync);
    NEXT(fdatasync);
}

ssize_t write(int fd, const void *buffer, size_t count) {
    NEXT(write);
    if (should_fail(fd)) return -1;
    return next_write(fd, buffer, count);
}

ssize_t pwrite(int fd, const void *buffer, size_t count, off_t offset) {
    NEXT(pwrite);
    if (should_fail(fd)) return -1;
    return next_pwrite(fd, buffer, count, offset);
}

ssize_t pwrite64(int fd, const void *buffer, size_t count, off64_t offset) {
    NEXT(pwrite64);
    if (should_fail(fd)) return -1;
    return next_pwrite64(fd, buffer, count, offset);
}

ssize_t writev(int fd, const struct iovec *vector, int count) {
    NEXT(writev);
    if (should_fail(fd)) return -1;
    return next_writev(fd, vector, count);
}

ssize_t pwritev(int fd, const struct iovec *vector, int count, off_t offset) {
    NEXT(pwritev);
    if (should_fail(fd)) return -1;
    return next_pwritev(fd, vector, count, offset);
}

int fsync(int fd) {
    NEXT(fsync);
    if (should_fail(fd)) return -1;
    return next_fsync(fd);
}

int fdatasync(int fd) {
    NEXT(fdatasync);
    if (should_fail(fd)) return -1;
    return next_fdatasync(fd);
}
