import CSQLite
import DepotCore
import Testing

import DepotSQLite

@Suite("SQLite error mapping")
struct SQLiteErrorTests {
    @Test(arguments: [
        (SQLiteCode.constraintPrimaryKey, DepotError.Code.duplicateKey), (SQLITE_BUSY, .busy), (SQLITE_FULL, .storeFull),
        (SQLiteCode.ioErrFsync, .io), (SQLITE_CORRUPT, .storeCorrupted), (SQLITE_NOTADB, .storeCorrupted),
        (SQLITE_READONLY, .permissionDenied),
    ])
    func resultCodesMapToDepotCodes(native: Int32, expected: DepotError.Code) {
        let error = DepotError.sqlite(native, message: "m", context: "c")
        #expect(error.code == expected)
        #expect(error.nativeCode == native)
    }
}
