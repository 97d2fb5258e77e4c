#include "CSQLiteFaultVFS.h"

#include <errno.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

// SQLite calls the VFS from every store's threads at once. The fault settings change
// rarely and are read under one pthread mutex (which Thread Sanitizer understands); an
// atomic flag lets every call on a file skip the mutex while no scope is set, so stores
// of other tests pay one relaxed load per call.

typedef struct FaultFile {
    sqlite3_file base;
    /// The name SQLite opened the file with; SQLite keeps it valid until xClose. NULL for
    /// temporary files, which are never in scope.
    const char *name;
    /// The wrapped VFS's file, allocated by SQLite right after this struct.
    sqlite3_file *real;
} FaultFile;

static sqlite3_vfs *real_vfs;
static sqlite3_vfs fault_vfs;
static pthread_once_t register_once = PTHREAD_ONCE_INIT;
static int register_rc = SQLITE_ERROR;

static atomic_int scope_active;
static pthread_mutex_t settings_lock = PTHREAD_MUTEX_INITIALIZER;
// Guarded by settings_lock.
static char *scope;
static size_t scope_length;
static int armed_ops;
static int64_t armed_after;
static int armed_errno;
static int64_t armed_failures_left;  // <= 0: until disarmed
static depot_fault_counts counts;

static int error_for(int op, int error_number) {
    switch (op) {
    case DEPOT_FAULT_OP_WRITE: return error_number == ENOSPC ? SQLITE_FULL : SQLITE_IOERR_WRITE;
    case DEPOT_FAULT_OP_SYNC: return SQLITE_IOERR_FSYNC;
    default: return SQLITE_IOERR_TRUNCATE;
    }
}

/// Counts a call of `op` on `file` and says whether it fails: SQLITE_OK to pass through,
/// or the result code to return instead.
static int decide(FaultFile *file, int op) {
    if (!atomic_load_explicit(&scope_active, memory_order_relaxed) || file->name == NULL) return SQLITE_OK;
    int rc = SQLITE_OK;
    pthread_mutex_lock(&settings_lock);
    if (scope != NULL && strncmp(file->name, scope, scope_length) == 0) {
        switch (op) {
        case DEPOT_FAULT_OP_WRITE: counts.writes++; break;
        case DEPOT_FAULT_OP_SYNC: counts.syncs++; break;
        default: counts.truncates++; break;
        }
        if (armed_ops & op) {
            if (armed_after > 0) {
                armed_after--;
            } else {
                rc = error_for(op, armed_errno);
                counts.injected++;
                if (armed_failures_left > 0 && --armed_failures_left == 0) armed_ops = 0;
            }
        }
    }
    pthread_mutex_unlock(&settings_lock);
    return rc;
}

// MARK: File methods: forward, failing where `decide` says so.

static int fault_close(sqlite3_file *f) {
    FaultFile *file = (FaultFile *)f;
    return file->real->pMethods->xClose(file->real);
}

static int fault_read(sqlite3_file *f, void *buffer, int amount, sqlite3_int64 offset) {
    FaultFile *file = (FaultFile *)f;
    return file->real->pMethods->xRead(file->real, buffer, amount, offset);
}

static int fault_write(sqlite3_file *f, const void *buffer, int amount, sqlite3_int64 offset) {
    FaultFile *file = (FaultFile *)f;
    int rc = decide(file, DEPOT_FAULT_OP_WRITE);
    if (rc != SQLITE_OK) {
        // A torn write: what a disk that fills up or fails mid-write can leave.
        if (amount >= 2) (void)file->real->pMethods->xWrite(file->real, buffer, amount / 2, offset);
        return rc;
    }
    return file->real->pMethods->xWrite(file->real, buffer, amount, offset);
}

static int fault_truncate(sqlite3_file *f, sqlite3_int64 size) {
    FaultFile *file = (FaultFile *)f;
    int rc = decide(file, DEPOT_FAULT_OP_TRUNCATE);
    if (rc != SQLITE_OK) return rc;
    return file->real->pMethods->xTruncate(file->real, size);
}

static int fault_sync(sqlite3_file *f, int flags) {
    FaultFile *file = (FaultFile *)f;
    int rc = decide(file, DEPOT_FAULT_OP_SYNC);
    if (rc != SQLITE_OK) return rc;
    return file->real->pMethods->xSync(file->real, flags);
}

static int fault_file_size(sqlite3_file *f, sqlite3_int64 *size) {
    FaultFile *file = (FaultFile *)f;
    return file->real->pMethods->xFileSize(file->real, size);
}

static int fault_lock(sqlite3_file *f, int level) {
    FaultFile *file = (FaultFile *)f;
    return file->real->pMethods->xLock(file->real, level);
}

static int fault_unlock(sqlite3_file *f, int level) {
    FaultFile *file = (FaultFile *)f;
    return file->real->pMethods->xUnlock(file->real, level);
}

static int fault_check_reserved_lock(sqlite3_file *f, int *result) {
    FaultFile *file = (FaultFile *)f;
    return file->real->pMethods->xCheckReservedLock(file->real, result);
}

static int fault_file_control(sqlite3_file *f, int op, void *argument) {
    FaultFile *file = (FaultFile *)f;
    return file->real->pMethods->xFileControl(file->real, op, argument);
}

static int fault_sector_size(sqlite3_file *f) {
    FaultFile *file = (FaultFile *)f;
    return file->real->pMethods->xSectorSize(file->real);
}

static int fault_device_characteristics(sqlite3_file *f) {
    FaultFile *file = (FaultFile *)f;
    return file->real->pMethods->xDeviceCharacteristics(file->real);
}

// The shared-memory and memory-map methods exist from version 2 and 3 of the methods; the
// unix VFS has both, but a wrapped file without them must not be called through NULL.
static int fault_shm_map(sqlite3_file *f, int region, int size, int extend, void volatile **pointer) {
    FaultFile *file = (FaultFile *)f;
    if (file->real->pMethods->iVersion < 2) return SQLITE_IOERR_SHMMAP;
    return file->real->pMethods->xShmMap(file->real, region, size, extend, pointer);
}

static int fault_shm_lock(sqlite3_file *f, int offset, int n, int flags) {
    FaultFile *file = (FaultFile *)f;
    if (file->real->pMethods->iVersion < 2) return SQLITE_IOERR_SHMLOCK;
    return file->real->pMethods->xShmLock(file->real, offset, n, flags);
}

static void fault_shm_barrier(sqlite3_file *f) {
    FaultFile *file = (FaultFile *)f;
    if (file->real->pMethods->iVersion >= 2) file->real->pMethods->xShmBarrier(file->real);
}

static int fault_shm_unmap(sqlite3_file *f, int delete_flag) {
    FaultFile *file = (FaultFile *)f;
    if (file->real->pMethods->iVersion < 2) return SQLITE_OK;
    return file->real->pMethods->xShmUnmap(file->real, delete_flag);
}

static int fault_fetch(sqlite3_file *f, sqlite3_int64 offset, int amount, void **pointer) {
    FaultFile *file = (FaultFile *)f;
    if (file->real->pMethods->iVersion < 3) {
        *pointer = NULL;
        return SQLITE_OK;
    }
    return file->real->pMethods->xFetch(file->real, offset, amount, pointer);
}

static int fault_unfetch(sqlite3_file *f, sqlite3_int64 offset, void *pointer) {
    FaultFile *file = (FaultFile *)f;
    if (file->real->pMethods->iVersion < 3) return SQLITE_OK;
    return file->real->pMethods->xUnfetch(file->real, offset, pointer);
}

static const sqlite3_io_methods fault_methods = {
    3,
    fault_close,
    fault_read,
    fault_write,
    fault_truncate,
    fault_sync,
    fault_file_size,
    fault_lock,
    fault_unlock,
    fault_check_reserved_lock,
    fault_file_control,
    fault_sector_size,
    fault_device_characteristics,
    fault_shm_map,
    fault_shm_lock,
    fault_shm_barrier,
    fault_shm_unmap,
    fault_fetch,
    fault_unfetch,
};

// MARK: VFS methods: forward.

static int fault_open(sqlite3_vfs *vfs, const char *name, sqlite3_file *f, int flags, int *out_flags) {
    (void)vfs;
    FaultFile *file = (FaultFile *)f;
    file->name = name;
    file->real = (sqlite3_file *)&file[1];
    int rc = real_vfs->xOpen(real_vfs, name, file->real, flags, out_flags);
    // SQLite calls xClose exactly when pMethods is set, failed open or not: mirror the
    // wrapped file.
    f->pMethods = file->real->pMethods != NULL ? &fault_methods : NULL;
    return rc;
}

static int fault_delete(sqlite3_vfs *vfs, const char *name, int sync_directory) {
    (void)vfs;
    return real_vfs->xDelete(real_vfs, name, sync_directory);
}

static int fault_access(sqlite3_vfs *vfs, const char *name, int flags, int *result) {
    (void)vfs;
    return real_vfs->xAccess(real_vfs, name, flags, result);
}

static int fault_full_pathname(sqlite3_vfs *vfs, const char *name, int size, char *out) {
    (void)vfs;
    return real_vfs->xFullPathname(real_vfs, name, size, out);
}

static void *fault_dl_open(sqlite3_vfs *vfs, const char *name) {
    (void)vfs;
    return real_vfs->xDlOpen(real_vfs, name);
}

static void fault_dl_error(sqlite3_vfs *vfs, int size, char *out) {
    (void)vfs;
    real_vfs->xDlError(real_vfs, size, out);
}

static void (*fault_dl_sym(sqlite3_vfs *vfs, void *handle, const char *symbol))(void) {
    (void)vfs;
    return real_vfs->xDlSym(real_vfs, handle, symbol);
}

static void fault_dl_close(sqlite3_vfs *vfs, void *handle) {
    (void)vfs;
    real_vfs->xDlClose(real_vfs, handle);
}

static int fault_randomness(sqlite3_vfs *vfs, int size, char *out) {
    (void)vfs;
    return real_vfs->xRandomness(real_vfs, size, out);
}

static int fault_sleep(sqlite3_vfs *vfs, int microseconds) {
    (void)vfs;
    return real_vfs->xSleep(real_vfs, microseconds);
}

static int fault_current_time(sqlite3_vfs *vfs, double *now) {
    (void)vfs;
    return real_vfs->xCurrentTime(real_vfs, now);
}

static int fault_get_last_error(sqlite3_vfs *vfs, int size, char *out) {
    (void)vfs;
    return real_vfs->xGetLastError(real_vfs, size, out);
}

static int fault_current_time_int64(sqlite3_vfs *vfs, sqlite3_int64 *now) {
    (void)vfs;
    return real_vfs->xCurrentTimeInt64(real_vfs, now);
}

static void register_now(void) {
    register_rc = sqlite3_initialize();
    if (register_rc != SQLITE_OK) return;
    real_vfs = sqlite3_vfs_find(NULL);
    if (real_vfs == NULL) {
        register_rc = SQLITE_ERROR;
        return;
    }
    fault_vfs = (sqlite3_vfs){
        .iVersion = 2,
        .szOsFile = (int)sizeof(FaultFile) + real_vfs->szOsFile,
        .mxPathname = real_vfs->mxPathname,
        .zName = "depot-fault",
        .xOpen = fault_open,
        .xDelete = fault_delete,
        .xAccess = fault_access,
        .xFullPathname = fault_full_pathname,
        .xDlOpen = fault_dl_open,
        .xDlError = fault_dl_error,
        .xDlSym = fault_dl_sym,
        .xDlClose = fault_dl_close,
        .xRandomness = fault_randomness,
        .xSleep = fault_sleep,
        .xCurrentTime = fault_current_time,
        .xGetLastError = fault_get_last_error,
        // Version 2; the version-3 system-call hooks are for SQLite's own tests.
        .xCurrentTimeInt64 = real_vfs->iVersion >= 2 ? fault_current_time_int64 : NULL,
    };
    register_rc = sqlite3_vfs_register(&fault_vfs, 0);
}

int depot_fault_vfs_register(void) {
    pthread_once(&register_once, register_now);
    return register_rc;
}

int depot_fault_vfs_make_default(int on) {
    int rc = depot_fault_vfs_register();
    if (rc != SQLITE_OK) return rc;
    return sqlite3_vfs_register(on ? &fault_vfs : real_vfs, 1);
}

void depot_fault_set_scope(const char *prefix) {
    char *copy = prefix != NULL ? strdup(prefix) : NULL;
    pthread_mutex_lock(&settings_lock);
    free(scope);
    scope = copy;
    scope_length = copy != NULL ? strlen(copy) : 0;
    armed_ops = 0;
    counts = (depot_fault_counts){0, 0, 0, 0};
    atomic_store(&scope_active, copy != NULL);
    pthread_mutex_unlock(&settings_lock);
}

void depot_fault_arm(int ops, int64_t after, int error_number, int64_t failures) {
    pthread_mutex_lock(&settings_lock);
    armed_ops = ops;
    armed_after = after > 0 ? after : 0;
    armed_errno = error_number;
    armed_failures_left = failures;
    pthread_mutex_unlock(&settings_lock);
}

void depot_fault_disarm(void) {
    pthread_mutex_lock(&settings_lock);
    armed_ops = 0;
    pthread_mutex_unlock(&settings_lock);
}

depot_fault_counts depot_fault_counters(void) {
    pthread_mutex_lock(&settings_lock);
    depot_fault_counts result = counts;
    pthread_mutex_unlock(&settings_lock);
    return result;
}

void depot_fault_reset_counters(void) {
    pthread_mutex_lock(&settings_lock);
    counts = (depot_fault_counts){0, 0, 0, 0};
    pthread_mutex_unlock(&settings_lock);
}
