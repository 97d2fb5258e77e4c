// An LD_PRELOAD shim for fault-injection tests (built as the dynamic library product
// DepotFaultShim). It has no API: it replaces write, pwrite, pwritev, writev, fsync and
// fdatasync in the process it is preloaded into, and reads its settings from the
// environment:
//
//   DEPOT_FAULT_FILE   the full path of the one file whose calls may fail (required)
//   DEPOT_FAULT_AFTER  how many write or sync calls on that file succeed first (0)
//   DEPOT_FAULT_TIMES  how many calls then fail before the disk works again (1)
//   DEPOT_FAULT_ERRNO  the errno the failing calls set: 5 (EIO, default) or 28 (ENOSPC)
//
// Every other file, and every process without DEPOT_FAULT_FILE, is passed straight
// through to the C library.
#ifndef CFAULTSHIM_H
#define CFAULTSHIM_H
#endif
