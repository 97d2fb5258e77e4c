// The system SQLite for the benchmark's raw baseline and the fault VFS (apt: libsqlite3-dev; pkg-config: sqlite3).
#include <sqlite3.h>
