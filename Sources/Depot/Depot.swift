// The umbrella module: `import Depot` brings in the core API and every backend.
@_exported import DepotCore
@_exported import DepotLMDB
@_exported import DepotSQLite
@_exported import DepotPostgres
