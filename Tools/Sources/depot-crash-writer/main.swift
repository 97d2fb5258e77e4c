// depot-crash-writer: the process DepotReliabilityTests kills.
//
//   depot-crash-writer write URL LOG SEED [MAX]
//       Opens the store, then commits crash-workload transactions (see CrashWorkload in
//       DepotTesting) until killed or until MAX transactions. After each commit returns, it
//       appends the transaction number to LOG and fsyncs LOG before starting the next one,
//       so every number in LOG is a commit Depot acknowledged.
//   depot-crash-writer migrate URL
//       Seeds CrashMigration's members unless they are there, then runs its migration (a
//       step rewriting every member), then prints "done".
//   depot-crash-writer import URL FILE
//       Imports CrashMigration's JSON file of arrivals in one transaction, then prints "done".
//   depot-crash-writer retype URL
//       Runs CrossProcessSchema's step turning Gizmo.code into an integer and registers the
//       new layout, then prints "done".
//   depot-crash-writer rename URL
//       Runs CrossProcessSchema's step renaming Widget.name to label, then prints "ran: "
//       and the steps that ran in this process (none when another process ran it).
//   depot-crash-writer open URL [--nobody]
//       Opens the store and registers the workload's entities, then prints "ok", or
//       "error CODE MESSAGE" for a DepotError. With --nobody, a root process first drops to
//       uid/gid 65534, so permission checks apply as they do for an ordinary user.
//
// Exit status: 0 when done, 1 on any failure (the message on stderr), 2 on bad arguments.

import Depot
import DepotTesting
import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

func fail(_ message: String, status: Int32 = 1) -> Never {
    FileHandle.standardError.write(Data("depot-crash-writer: \(message)\n".utf8))
    exit(status)
}

/// The side log, written with plain POSIX calls so that the bytes reach the file (and the
/// disk) before the next transaction starts: nothing is buffered in this process when it
/// is killed.
struct SideLog {
    let descriptor: Int32

    init(path: String) {
        descriptor = open(path, O_WRONLY | O_CREAT | O_APPEND, 0o644)
        if descriptor < 0 { fail("cannot open the side log \(path): errno \(errno)") }
    }

    func acknowledge(_ txn: Int64) {
        let line = Array("\(txn)\n".utf8)
        let written = line.withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
        if written != line.count { fail("cannot append to the side log: errno \(errno)") }
        if fsync(descriptor) != 0 { fail("cannot fsync the side log: errno \(errno)") }
    }
}

/// Ends this process when the test that started it is gone (its parent changes), so a
/// test run that is interrupted never leaves a writer running on its own.
func exitWithParent() {
    let parent = getppid()
    Thread.detachNewThread {
        while getppid() == parent { usleep(100_000) }
        exit(3)
    }
}

func runWriter(url: String, logPath: String, seed: UInt64, maximum: Int) async {
    exitWithParent()
    let log = SideLog(path: logPath)
    var generator = SplitMix64(seed: seed)
    let store: any Store
    let entities: CrashWorkload.Entities
    do {
        store = try await openStore(url: url)
        entities = try await CrashWorkload.register(store)
    } catch {
        fail("cannot open \(url): \(error)")
    }
    var done = 0
    while done < maximum {
        let plan = CrashWorkload.plan(using: &generator)
        do {
            let txn = try await CrashWorkload.commit(plan, to: store, entities)
            log.acknowledge(txn)
        } catch let error as DepotError where error.code == .busy {
            // Another writer process held the lock past the busy timeout: not a loss, just
            // contention; try the next transaction.
            continue
        } catch {
            fail("a commit failed: \(error)")
        }
        done += 1
    }
    await store.close()
}

func runOpen(url: String, asNobody: Bool) async {
    if asNobody && getuid() == 0 {
        // Group first: once the user id is dropped, changing the group is no longer allowed.
        guard setgroups(0, nil) == 0, setgid(65534) == 0, setuid(65534) == 0 else {
            fail("cannot drop to uid 65534: errno \(errno)")
        }
    }
    do {
        let store = try await openStore(url: url)
        try await CrashWorkload.register(store)
        await store.close()
        print("ok")
    } catch let error as DepotError {
        print("error \(error.code.name) \(error.message)")
    } catch {
        print("error other \(error)")
    }
}

let arguments = Array(CommandLine.arguments.dropFirst())
switch arguments.first {
case "write" where arguments.count == 4 || arguments.count == 5:
    guard let seed = UInt64(arguments[3]) else { fail("SEED must be a whole number", status: 2) }
    let maximum = arguments.count == 5 ? Int(arguments[4]) : Int.max
    guard let maximum, maximum >= 0 else { fail("MAX must be a whole number", status: 2) }
    await runWriter(url: arguments[1], logPath: arguments[2], seed: seed, maximum: maximum)
case "migrate" where arguments.count == 2, "import" where arguments.count == 3:
    exitWithParent()
    do {
        // The blocking overload (the one the compiler picks here): this helper has nothing
        // else to run while the store opens.
        let store = try openStoreBlocking(url: arguments[1])
        if arguments[0] == "migrate" {
            try await CrashMigration.migrate(store)
        } else {
            try await CrashMigration.importAll(store, file: arguments[2])
        }
        await store.close()
        print("done")
    } catch {
        fail("\(arguments[0]) failed: \(error)")
    }
case "retype" where arguments.count == 2, "rename" where arguments.count == 2:
    exitWithParent()
    do {
        // The blocking overload (the one the compiler picks here): this helper has nothing
        // else to run while the store opens.
        let store = try openStoreBlocking(url: arguments[1])
        if arguments[0] == "retype" {
            try await CrossProcessSchema.retype(store)
            print("done")
        } else {
            // Which steps ran here: the test checks that exactly one process ran the step.
            print("ran: \(try await CrossProcessSchema.rename(store).joined(separator: ","))")
        }
        await store.close()
    } catch {
        fail("\(arguments[0]) failed: \(error)")
    }
case "open" where arguments.count == 2 || (arguments.count == 3 && arguments[2] == "--nobody"):
    await runOpen(url: arguments[1], asNobody: arguments.count == 3)
default:
    fail("usage: depot-crash-writer write URL LOG SEED [MAX] | migrate URL | import URL FILE | retype URL | rename URL | open URL [--nobody]", status: 2)
}
