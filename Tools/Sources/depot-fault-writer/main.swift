// depot-fault-writer: the process the LMDB fault-injection tests run with the
// fault shim (libDepotFaultShim.so) preloaded, so that chosen writes of the store fail.
//
//   depot-fault-writer URL COUNT
//       Opens the store and commits COUNT transactions of ten cats each (transaction i
//       holds the cats with ids 10·i … 10·i + 9). After each one it prints "ack i" when
//       the commit returned, or "error i CODE NATIVE" when it threw a DepotError (any
//       other error: "error i notDepotError …"), and carries on with the next, so the
//       output shows whether the store works again after a failure. A failure to open
//       prints "error open CODE NATIVE".
//
// Exit status: 0 when every transaction was tried, 2 on bad arguments.

import Depot
import DepotTesting
import Foundation

/// Unbuffered, so every line is out before the next transaction starts.
func say(_ line: String) {
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
}

func describe(_ error: any Error) -> String {
    guard let error = error as? DepotError else { return "notDepotError \(error)" }
    return "\(error.code.name) \(error.nativeCode ?? 0)"
}

let arguments = CommandLine.arguments
guard arguments.count == 3, let count = Int(arguments[2]), count > 0 else {
    FileHandle.standardError.write(Data("usage: depot-fault-writer URL COUNT\n".utf8))
    exit(2)
}

let store: any Store
do {
    store = try openStoreBlocking(url: arguments[1])
} catch {
    say("error open \(describe(error))")
    exit(0)
}
let cats = Controller<Cat, CatRecord>(store: store)
for i in 1...count {
    let batch = (0..<10).map { j in
        Cat(id: Int64(10 * i + j), name: "cat \(i).\(j) " + String(repeating: "x", count: 600), weight: Double(j), age: i)
    }
    do {
        try await cats.save(batch)
        say("ack \(i)")
    } catch {
        say("error \(i) \(describe(error))")
    }
}
await store.close()
