// The system SQLite (apt: libsqlite3-dev; pkg-config: sqlite3).
#include <sqlite3.h>

// sqlite3_db_config is variadic, which Swift cannot call: one fixed-argument wrapper per
// integer option Depot sets.
static inline int depot_sqlite3_db_config_int(sqlite3 *db, int option, int value) {
    int current = 0;
    return sqlite3_db_config(db, option, value, &current);
}
