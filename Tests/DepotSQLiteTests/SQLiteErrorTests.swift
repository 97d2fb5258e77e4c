import CSQLite
import DepotCore
import Testing

@testable import DepotSQLite

@Suite("SQLite error mapping")
struct SQLiteErrorTests {
    @Test(arguments: [
        (Int32(1555) /* SQLITE_CONSTRAINT_PRIMARYKEY */, DepotError.Code.duplicateKey), (SQLITE_BUSY, .busy), (SQLITE_FULL, .storeFull),
        (Int32(1034) /* SQLITE_IOERR_FSYNC */, .io), (SQLITE_CORRUPT, .storeCorrupted), (SQLITE_NOTADB, .storeCorrupted),
        (SQLITE_READONLY, .permissionDenied),
    ])
    func resultCodesMapToDepotCodes(native: Int32, expected: DepotError.Code) {
        let error = DepotError.sqlite(native, message: "m", context: "c")
        #expect(error.code == expected)
        #expect(error.nativeCode == native)
    }
}
