import CLMDB
import DepotCore
import Testing

import DepotLMDB

@Suite("LMDB error mapping")
struct LMDBErrorTests {
    @Test(arguments: [
        (MDB_KEYEXIST, DepotError.Code.duplicateKey), (MDB_MAP_FULL, .storeFull), (MDB_CORRUPTED, .storeCorrupted),
        (MDB_INVALID, .storeCorrupted), (MDB_BAD_VALSIZE, .invalidValue), (Int32(28), .storeFull), (MDB_PANIC, .io),
    ])
    func returnCodesMapToDepotCodes(native: Int32, expected: DepotError.Code) {
        let error = DepotError.lmdb(native, context: "c")
        #expect(error.code == expected)
        #expect(error.nativeCode == native)
        #expect(!error.message.isEmpty)
    }
}
