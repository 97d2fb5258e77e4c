// The umbrella module: `import Depot` brings in the core API and every backend: SQLite,
// LMDB and memory always, PostgreSQL with the package's `PostgreSQL` trait on.
@_exported import DepotCore
@_exported import DepotLMDB
@_exported import DepotSQLite
#if PostgreSQL
@_exported import DepotPostgres
#endif
