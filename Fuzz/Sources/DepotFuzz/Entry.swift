import Foundation

// libFuzzer supplies the loop, the mutations and the corpus; this file supplies `main`
// (SwiftPM links an executable's entry point as `<Target>_main`) so one binary can hold
// every target: `DepotFuzz <target> [libFuzzer flags and corpus folders]`.

@_silgen_name("LLVMFuzzerRunDriver")
private func runDriver(
    _ argc: UnsafeMutablePointer<CInt>,
    _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>,
    _ callback: @convention(c) (UnsafePointer<UInt8>?, Int) -> CInt
) -> CInt

/// A fuzz target: gets one input, must return for every input. A trap, an ASan report or
/// a `fatalError` from a violated property is the finding.
typealias FuzzTarget = @Sendable (UnsafeRawBufferPointer) -> Void

let targets: [(name: String, help: String, run: FuzzTarget)] = [
    ("url", "StoreURL parsing, description round trip, and opening the store it names in a scratch folder", URLTarget.run),
    ("request", "a program building a predicate tree, sort keys, limit and offset; resolved and run on every backend and through ResultSet", RequestTarget.run),
    ("record", "the LMDB record (value) decoder on arbitrary bytes, with re-encoding round trips", RecordTarget.run),
    ("keys", "the LMDB key encodings: their byte order must equal Depot's value order", KeyTarget.run),
    ("cursor", "page cursor tokens: read or refused, and a cursor's own token reads back as it", CursorTarget.run),
    ("schema", "stored-schema JSON: EntityDescription decoding and validation, and the LMDB catalog reading and migrating from it", SchemaTarget.run),
]

// Set once in main, before libFuzzer starts calling back on this thread.
nonisolated(unsafe) private var selected: FuzzTarget?

@_cdecl("DepotFuzz_main")
public func fuzzMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> CInt {
    let arguments = (0..<Int(argc)).map { argv[$0].map { String(cString: $0) } ?? "" }
    if arguments.count >= 3, arguments[1] == "seeds" {
        return Seeds.write(to: arguments[2])
    }
    guard arguments.count >= 2, let target = targets.first(where: { $0.name == arguments[1] }) else {
        var usage = "usage: DepotFuzz <target> [libFuzzer options] [corpus folders]\n       DepotFuzz seeds <folder>\ntargets:\n"
        for target in targets { usage += "  \(target.name): \(target.help)\n" }
        FileHandle.standardError.write(Data(usage.utf8))
        return 2
    }
    selected = target.run
    // libFuzzer sees the remaining arguments as if the target name had not been there.
    argv[1] = argv[0]
    var count = argc - 1
    var rest: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>? = argv + 1
    return runDriver(&count, &rest) { data, size in
        selected?(UnsafeRawBufferPointer(start: data, count: size))
        return 0
    }
}

/// libFuzzer's conventional entry, which its own (unused) `main` refers to; the linker
/// needs it defined. It runs the selected target like the driver's callback.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOne(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    selected?(UnsafeRawBufferPointer(start: data, count: size))
    return 0
}
