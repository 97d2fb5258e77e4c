// A test-only SQLite VFS that wraps the default one and makes chosen writes, syncs or
// truncations fail, so tests can show what the store does when the disk fails.
//
// The VFS is named "depot-fault". Files outside the current scope (a path prefix) pass
// straight through, untouched and uncounted, so stores of other tests that happen to
// open while it is the default VFS are not affected.
#ifndef CSQLITE_FAULT_VFS_H
#define CSQLITE_FAULT_VFS_H

#include <stdint.h>

/// The operations a fault can hit (a bit set).
#define DEPOT_FAULT_OP_WRITE 1
#define DEPOT_FAULT_OP_SYNC 2
#define DEPOT_FAULT_OP_TRUNCATE 4

/// Calls seen on files in scope since the last reset, and faults injected.
typedef struct {
    int64_t writes;
    int64_t syncs;
    int64_t truncates;
    int64_t injected;
} depot_fault_counts;

/// Registers "depot-fault" over the current default VFS (once per process; later calls do
/// nothing). Returns an SQLite result code.
int depot_fault_vfs_register(void);

/// With `on` nonzero, makes "depot-fault" the default VFS, so every connection opened
/// from now on goes through it; with `on` zero, makes the wrapped VFS the default again.
/// Connections already open keep the VFS they were opened with (which stays registered).
/// Returns an SQLite result code.
int depot_fault_vfs_make_default(int on);

/// Faults and counts only files whose full path starts with `prefix` (copied);
/// NULL ends the scope, disarms and resets the counters.
void depot_fault_set_scope(const char *prefix);

/// Arms a fault: the next `after` calls of the operations in `ops` on files in scope
/// succeed, then each one fails as the unix VFS reports that `error_number` (EIO, ENOSPC)
/// from the system call: a write with ENOSPC gives SQLITE_FULL, any other write error
/// SQLITE_IOERR_WRITE, a sync SQLITE_IOERR_FSYNC, a truncation SQLITE_IOERR_TRUNCATE.
/// A failing write first writes half its bytes, as a write cut short by a full or
/// failing disk can. After `failures` failed calls the fault clears by itself; with
/// `failures` <= 0 it lasts until `depot_fault_disarm`.
void depot_fault_arm(int ops, int64_t after, int error_number, int64_t failures);

/// Clears the fault: every call passes through again. Counters are kept.
void depot_fault_disarm(void);

depot_fault_counts depot_fault_counters(void);

void depot_fault_reset_counters(void);

#endif
