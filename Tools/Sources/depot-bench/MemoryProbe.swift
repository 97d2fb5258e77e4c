import DepotTesting
import Foundation

/// Peak resident memory during W2, measured for each subject in a process of its own: in
/// one shared process, every subject's allocations would count towards the others' peaks.
///
/// The parent starts `depot-bench --rss-probe <subject>` once per subject, after the timed
/// runs, on the store those runs populated (the memory store populates its own). The child
/// opens the store, resets the kernel's high-water mark (`/proc/self/clear_refs`), fetches
/// every record once, and prints its peak (`VmHWM`) and the resident size just before the
/// fetch (`VmRSS`), in KiB.
enum MemoryProbe {
    struct Reading: Codable {
        /// The process's peak resident size while W2 ran, in KiB.
        let peakKiB: Int
        /// The resident size just before W2, in KiB.
        let baselineKiB: Int
    }

    /// Runs in the child: W2 once on `subject`, then prints the reading as JSON.
    static func probe(_ subject: any BenchSubject, directory: URL, records: Int) async throws {
        try await subject.open(at: directory)
        if subject.name == "memory" {
            try await subject.saveAll(Cat.workload(count: records))
        }
        guard try await subject.count() == records else {
            throw BenchError("the \(subject.name) store to probe does not hold \(records) cats")
        }
        // "5" resets the peak resident size to the current one (Linux 4.0 and later).
        try? "5".write(toFile: "/proc/self/clear_refs", atomically: false, encoding: .utf8)
        let baseline = status("VmRSS")
        let cats = try await subject.fetchAll()
        let peak = status("VmHWM")
        guard cats.count == records else { throw BenchError("W2 on \(subject.name) returned \(cats.count) cats") }
        await subject.close()
        guard let peak, let baseline else { throw BenchError("/proc/self/status has no VmHWM or VmRSS on this system") }
        let json = try JSONEncoder().encode(Reading(peakKiB: peak, baselineKiB: baseline))
        print(String(decoding: json, as: UTF8.self))
    }

    /// A `kB` field of `/proc/self/status`.
    static func status(_ field: String) -> Int? {
        guard let text = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else { return nil }
        for line in text.split(separator: "\n") where line.hasPrefix(field + ":") {
            return line.split(separator: " ").dropFirst().first.flatMap { Int($0) }
        }
        return nil
    }

    /// Runs in the parent: one child per subject.
    static func measure(subjects: [String], directory: URL, records: Int, durability: String) throws -> [String: Reading] {
        let executable = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().path
        var readings: [String: Reading] = [:]
        for subject in subjects {
            let result = try ProcessLaunch.run(executable, [
                "--rss-probe", subject, "--directory", directory.appendingPathComponent("populated-\(subject)").path,
                "--records", "\(records)", "--durability", durability,
            ])
            guard result.exit.succeeded, let line = result.stdout.split(separator: "\n").last,
                let reading = try? JSONDecoder().decode(Reading.self, from: Data(line.utf8))
            else {
                throw BenchError("the memory probe of \(subject) failed (\(result.exit)): \(result.stderr)")
            }
            readings[subject] = reading
        }
        return readings
    }
}
