import Foundation

/// One performance target (docs/benchmarks/README.md), checked against measured figures.
struct TargetCheck: Codable {
    let workload: String
    let backend: String
    let target: String
    let measured: String
    let met: Bool?

    var line: String {
        let verdict = met.map { $0 ? "met" : "NOT met" } ?? "not measured"
        return "target \(workload) \(backend): \(target) — measured \(measured) — \(verdict)"
    }
}

enum Targets {
    /// Ratio limits per backend and workload: issue #12's table for W1, W2, W4 and W5,
    /// issue #13's for W3, issue #15's for W7 (JSON import against JSONDecoder plus the raw
    /// engine).
    static let ratios: [String: [String: Double]] = [
        "sqlite": ["W1": 1.15, "W2": 1.10, "W4": 1.20, "W5": 1.05, "W3": 1.10, "W7": 1.50, "W8": w8Ratio],
        "lmdb": ["W1": 1.30, "W2": 1.50, "W4": 1.30, "W5": 1.30, "W3": 1.05, "W7": 1.50, "W8": w8Ratio],
        // Issue #16: the same targets as SQLite where they apply.
        "postgres": ["W1": 1.15, "W2": 1.10, "W4": 1.20, "W5": 1.05, "W3": 1.10, "W7": 1.50, "W8": w8Ratio],
    ]
    /// Issue #13: microseconds per W4' call above the raw engine's own per-call cost (the
    /// memory store: in all).
    static let perCallAboveRaw = 3.0
    static let memoryPerCall = 3.0
    /// Issue #13: W6 reads per second as a share of the raw engine behind the same async
    /// hand-off, and the W6 read p99 in microseconds.
    static let w6ReadShare = 0.8
    static let w6P99: [String: Double] = ["sqlite": 150, "lmdb": 50, "memory": 50, "postgres": 150]
    /// Issue #36: W6e reads per second (tasks preferring the store's executor) as a share of
    /// the raw engine's W6t on plain threads, with W6's p99 limit.
    static let w6eThreadShare: [String: Double] = ["sqlite": 0.6, "lmdb": 0.6]
    /// The limit on peak resident memory during W2, as a ratio to the raw engine's.
    static let peakRSSRatio = 1.3
    /// Issue #37: the list page with a composite index against the raw engine's same
    /// indexed query (W8, in `ratios`), against the same request without the index (W8n ÷
    /// W8, on every backend), and a walk's last cursor page against its first (W8c).
    static let w8Ratio = 1.2
    static let w8IndexSpeedUp = 20.0
    static let w8cLastPageRatio = 1.5

    static func check(_ results: [Measurement]) -> [TargetCheck] {
        var checks: [TargetCheck] = []
        func find(_ backend: String, _ workload: String) -> Measurement? {
            results.first { $0.backend == backend && $0.workload == workload && !$0.samplesMs.isEmpty }
        }
        // A backend not in this run (postgres without a server) gets no lines.
        let measured = Set(results.map(\.backend))
        for backend in ["sqlite", "lmdb", "postgres"] where measured.contains(backend) {
            for workload in ["W1", "W2", "W3", "W3e", "W4", "W5", "W7", "W8", "W8e"] {
                // W3e and W8e: W3 and W8 from a task preferring the store's executor.
                guard let limit = ratios[backend]?[workload.hasSuffix("e") ? String(workload.dropLast()) : workload] else { continue }
                let m = find(backend, workload)
                let ratio = m?.ratioToRaw
                checks.append(
                    TargetCheck(
                        workload: workload, backend: backend, target: String(format: "≤ %.2f× raw", limit),
                        measured: ratio.map { String(format: "%.2f×", $0) } ?? "–", met: ratio.map { $0 <= limit }))
            }
            let rss = results.first { $0.backend == backend && $0.workload == "W2" }?.rssRatioToRaw
            checks.append(
                TargetCheck(
                    workload: "W2 peak RSS", backend: backend, target: String(format: "≤ %.2f× raw", peakRSSRatio),
                    measured: rss.map { String(format: "%.2f×", $0) } ?? "–", met: rss.map { $0 <= peakRSSRatio }))
            let perCallTarget = String(format: "≤ %.0f µs per call above raw", perCallAboveRaw)
            if let depot = find(backend, "W4p"), let raw = find("raw-\(backend)", "W4p"),
                let a = depot.perCallMicroseconds, let b = raw.perCallMicroseconds
            {
                checks.append(
                    TargetCheck(
                        workload: "W4p", backend: backend, target: perCallTarget,
                        measured: String(format: "%.2f µs above raw (%.2f vs %.2f µs)", a - b, a, b), met: a - b <= perCallAboveRaw))
            } else {
                checks.append(TargetCheck(workload: "W4p", backend: backend, target: perCallTarget, measured: "–", met: nil))
            }
            if let depot = find(backend, "W4pe"), let raw = find("raw-\(backend)", "W4p"),
                let a = depot.perCallMicroseconds, let b = raw.perCallMicroseconds
            {
                checks.append(
                    TargetCheck(
                        workload: "W4pe", backend: backend, target: perCallTarget + " (task preferring store.executor)",
                        measured: String(format: "%.2f µs above raw (%.2f vs %.2f µs)", a - b, a, b), met: a - b <= perCallAboveRaw))
            }
            let shareTarget = String(format: "reads/s ≥ %.1f× raw behind the same hand-off", w6ReadShare)
            if let depot = find(backend, "W6"), let raw = find("raw-\(backend)", "W6"),
                let a = depot.readsPerSecond, let b = raw.readsPerSecond, b > 0
            {
                checks.append(
                    TargetCheck(
                        workload: "W6", backend: backend, target: shareTarget,
                        measured: String(format: "%.2f× (%.0f vs %.0f reads/s)", a / b, a, b), met: a / b >= w6ReadShare))
            } else {
                checks.append(TargetCheck(workload: "W6", backend: backend, target: shareTarget, measured: "–", met: nil))
            }
            // Issue #36: concurrency near the engine, not near the hop.
            if let limit = w6eThreadShare[backend] {
                let target = String(format: "reads/s ≥ %.1f× raw on plain threads (W6t), tasks preferring store.executor", limit)
                if let depot = find(backend, "W6e"), let raw = find("raw-\(backend)", "W6t"),
                    let a = depot.readsPerSecond, let b = raw.readsPerSecond, b > 0
                {
                    checks.append(
                        TargetCheck(
                            workload: "W6e", backend: backend, target: target,
                            measured: String(format: "%.2f× (%.0f vs %.0f reads/s)", a / b, a, b), met: a / b >= limit))
                } else {
                    checks.append(TargetCheck(workload: "W6e", backend: backend, target: target, measured: "–", met: nil))
                }
            }
        }
        for backend in ["sqlite", "lmdb", "memory", "postgres"] where measured.contains(backend) {
            guard let limit = w6P99[backend] else { continue }
            let p99 = find(backend, "W6")?.p99Microseconds
            checks.append(
                TargetCheck(
                    workload: "W6 p99", backend: backend, target: String(format: "≤ %.0f µs", limit),
                    measured: p99.map { String(format: "%.1f µs", $0) } ?? "–", met: p99.map { $0 <= limit }))
            if w6eThreadShare[backend] != nil {
                let p99e = find(backend, "W6e")?.p99Microseconds
                checks.append(
                    TargetCheck(
                        workload: "W6e p99", backend: backend, target: String(format: "≤ %.0f µs", limit),
                        measured: p99e.map { String(format: "%.1f µs", $0) } ?? "–", met: p99e.map { $0 <= limit }))
            }
        }
        // Issue #37: what the composite index buys, and cursor pages that cost the same at
        // any depth. Only for runs that measured the list page.
        for backend in ["memory", "sqlite", "lmdb", "postgres"] where measured.contains(backend) {
            let indexed = find(backend, "W8")
            let unindexed = find(backend, "W8n")
            if indexed != nil || unindexed != nil {
                let speedUp = indexed.flatMap { w8 in unindexed.map { $0.medianMs / w8.medianMs } }
                checks.append(
                    TargetCheck(
                        workload: "W8 index", backend: backend, target: String(format: "≥ %.0f× faster than without the index (W8n ÷ W8)", w8IndexSpeedUp),
                        measured: speedUp.map { String(format: "%.1f×", $0) } ?? "–", met: speedUp.map { $0 >= w8IndexSpeedUp }))
            }
            if let walk = find(backend, "W8c") {
                let ratio = walk.firstPageMicroseconds.flatMap { first in walk.lastPageMicroseconds.map { $0 / first } }
                let measuredText =
                    ratio.map { ratio in
                        String(
                            format: "%.2f× (%.1f vs %.1f µs, page %d)", ratio, walk.lastPageMicroseconds ?? .nan, walk.firstPageMicroseconds ?? .nan,
                            walk.pagesPerWalk ?? 0)
                    } ?? "–"
                checks.append(
                    TargetCheck(
                        workload: "W8c", backend: backend, target: String(format: "last cursor page ≤ %.1f× the first", w8cLastPageRatio),
                        measured: measuredText, met: ratio.map { $0 <= w8cLastPageRatio }))
            }
        }
        let memoryCall = find("memory", "W4p")?.perCallMicroseconds
        checks.append(
            TargetCheck(
                workload: "W4p", backend: "memory", target: String(format: "≤ %.0f µs per call", memoryPerCall),
                measured: memoryCall.map { String(format: "%.2f µs", $0) } ?? "–", met: memoryCall.map { $0 <= memoryPerCall }))
        for (workload, floor) in [("W1", 5_000_000.0), ("W2", 15_000_000.0)] {
            let rate = find("memory", workload)?.objectsPerSecond
            checks.append(
                TargetCheck(
                    workload: workload, backend: "memory", target: String(format: "≥ %.0fM objects/s", floor / 1_000_000),
                    measured: rate.map { String(format: "%.2fM objects/s", $0 / 1_000_000) } ?? "–", met: rate.map { $0 >= floor }))
        }
        return checks
    }
}

/// Where an ordinary task's per-call time goes: the raw engine's own call, the hop every
/// async call from an ordinary task makes (the raw engine behind the same hand-off, W4ph and
/// W3h), and what Depot adds above that. Figures, not targets: the targets stay the ones of
/// `Targets`.
enum Breakdown {
    static func lines(_ results: [Measurement]) -> [String] {
        func find(_ backend: String, _ workload: String) -> Measurement? {
            results.first { $0.backend == backend && $0.workload == workload && !$0.samplesMs.isEmpty }
        }
        var lines: [String] = []
        for backend in ["sqlite", "lmdb", "postgres"] {
            if let depot = find(backend, "W4p")?.perCallMicroseconds, let raw = find("raw-\(backend)", "W4p")?.perCallMicroseconds,
                let hop = find("raw-\(backend)", "W4ph")?.perCallMicroseconds
            {
                lines.append(
                    String(
                        format: "W4p %@: raw %.2f µs per call; raw behind the same hand-off %.2f µs (the hop: %.2f µs); Depot %.2f µs, %.2f µs above the raw engine behind the hop",
                        backend, raw, hop, hop - raw, depot, depot - hop))
            }
            if let depot = find(backend, "W3"), let raw = find("raw-\(backend)", "W3"), let hop = find("raw-\(backend)", "W3h") {
                // W3 is 1,000 saves: its milliseconds are microseconds per save.
                let perSave = { (m: Measurement) in m.medianMs }
                lines.append(
                    String(
                        format: "W3 %@: raw %.1f µs per save; raw behind the same hand-off %.1f µs (%.2f× raw); Depot %.1f µs, %.2f× the raw engine behind the hop",
                        backend, perSave(raw), perSave(hop), hop.medianMs / raw.medianMs, perSave(depot), depot.medianMs / hop.medianMs))
            }
        }
        return lines
    }
}

/// Everything a run produced, in the shape `results.json` promises.
struct Report: Codable {
    let records: Int
    /// The pets the list-page workloads read, when they ran (older records have none: their
    /// pets were as many as their records).
    var pets: Int? = nil
    let repetitions: Int
    let build: String
    /// The commit measured, when the caller said (`--commit`).
    let commit: String?
    let durability: String
    let date: String
    let machine: String
    let results: [Measurement]
    let targets: [TargetCheck]
    /// Where an ordinary task's per-call time goes (``Breakdown``).
    let breakdown: [String]

    static let backendOrder = ["memory", "sqlite", "raw-sqlite", "lmdb", "raw-lmdb", "postgres", "raw-postgres"]

    var backends: [String] {
        Self.backendOrder.filter { name in results.contains { $0.backend == name } }
    }

    var workloads: [String] {
        Workload.allCases.map(\.rawValue).filter { name in results.contains { $0.workload == name } }
    }

    func measurement(_ backend: String, _ workload: String) -> Measurement? {
        results.first { $0.backend == backend && $0.workload == workload }
    }

    static func format(_ ms: Double) -> String {
        if ms.isNaN { return "–" }
        if ms >= 100 { return String(format: "%.0f ms", ms) }
        if ms >= 10 { return String(format: "%.1f ms", ms) }
        return String(format: "%.2f ms", ms)
    }

    func cell(_ m: Measurement?) -> String {
        guard let m, !m.samplesMs.isEmpty else { return "–" }
        let spread = m.maxMs - m.minMs
        var text = "\(Self.format(m.medianMs)) ±\(Self.format(spread / 2).replacingOccurrences(of: " ms", with: ""))"
        if let ratio = m.ratioToRaw { text += String(format: " (%.2f×)", ratio) }
        if !m.checksumOK { text += " CHECKSUM FAILED" }
        return text
    }

    /// How many pets the list pages read, when not as many as the records.
    var petsNote: String {
        guard let pets, pets != records else { return "" }
        return " (\(pets) pets for W8)"
    }

    /// The plain-text table printed to stdout.
    var table: String {
        var lines: [String] = []
        lines.append("Depot backend comparison — \(records) records\(petsNote), \(repetitions) repetitions, \(build) build, \(date)")
        lines.append("Durability: \(durability). Median ± half the spread; (×) is the ratio to the raw engine, same run.")
        lines.append("")
        let widths = [8] + backends.map { _ in 26 }
        func row(_ cells: [String]) -> String {
            zip(cells, widths).map { $0.padding(toLength: $1, withPad: " ", startingAt: 0) }.joined(separator: " ")
        }
        lines.append(row(["workload"] + backends))
        for workload in workloads {
            lines.append(row([workload] + backends.map { cell(measurement($0, workload)) }))
        }
        lines.append("")
        for workload in workloads {
            if let kind = Workload(rawValue: workload) { lines.append("\(workload): \(kind.summary)") }
        }
        let extras = results.compactMap { m -> String? in
            var parts: [String] = []
            if let v = m.perCallMicroseconds { parts.append(String(format: "%.2f µs per call", v)) }
            if let v = m.p99Microseconds { parts.append(String(format: "read p99 %.1f µs", v)) }
            if let v = m.readsPerSecond { parts.append(String(format: "%.0f reads/s", v)) }
            if let v = m.objectsPerSecond { parts.append(String(format: "%.2fM objects/s", v / 1_000_000)) }
            if let first = m.firstPageMicroseconds, let last = m.lastPageMicroseconds {
                parts.append(String(format: "first page %.1f µs, last page (page %d) %.1f µs", first, m.pagesPerWalk ?? 0, last))
            }
            if let peak = m.peakRSSKiB {
                var text = String(format: "peak RSS %.1f MiB", Double(peak) / 1024)
                if let before = m.rssBeforeKiB { text += String(format: " (%.1f MiB before the fetch)", Double(before) / 1024) }
                if let ratio = m.rssRatioToRaw { text += String(format: ", %.2f× raw", ratio) }
                parts.append(text)
            }
            return parts.isEmpty ? nil : "\(m.workload) \(m.backend): " + parts.joined(separator: ", ")
        }
        if !extras.isEmpty {
            lines.append("")
            lines += extras
        }
        lines.append("")
        lines += targets.map(\.line)
        if !breakdown.isEmpty {
            lines.append("")
            lines += breakdown
        }
        return lines.joined(separator: "\n")
    }

    var markdown: String {
        var md = "# Depot backend comparison\n\n"
        md += "\(records) records\(petsNote), \(repetitions) repetitions, \(build) build, \(date), "
        md += commit.map { "commit \($0), " } ?? ""
        md += "\(machine).\n"
        md += "Durability: \(durability).\n\n"
        md += "| workload | " + backends.joined(separator: " | ") + " |\n"
        md += "|---|" + backends.map { _ in "---|" }.joined() + "\n"
        for workload in workloads {
            md += "| \(workload) | " + backends.map { cell(measurement($0, workload)) }.joined(separator: " | ") + " |\n"
        }
        md += "\nMedian ± half the spread; (×) is the ratio to the raw engine measured in the same run.\n\n"
        for workload in workloads {
            if let kind = Workload(rawValue: workload) { md += "- **\(workload)**: \(kind.summary)\n" }
        }
        md += "\n## Targets (docs/benchmarks/README.md)\n\n"
        md += targets.map { "- \($0.line)" }.joined(separator: "\n") + "\n"
        if !breakdown.isEmpty {
            md += "\n## The hop from an ordinary task\n\n"
            md += breakdown.map { "- \($0)" }.joined(separator: "\n") + "\n"
        }
        md += "\n![chart](chart.svg)\n"
        return md
    }

    /// Writes report.md and chart.svg into `folder`, beside its results.json.
    func writePages(to folder: URL) throws {
        try Data(markdown.utf8).write(to: folder.appendingPathComponent("report.md"))
        try Data(chart.utf8).write(to: folder.appendingPathComponent("chart.svg"))
    }

    /// A grouped bar chart: per workload, each subject's throughput relative to the fastest
    /// subject on that workload (longer is better), labelled with the median time.
    var chart: String {
        let colors = [
            "memory": "#8e44ad", "sqlite": "#2471a3", "raw-sqlite": "#85c1e9", "lmdb": "#1e8449", "raw-lmdb": "#82e0aa",
            "postgres": "#b9770e", "raw-postgres": "#f8c471",
        ]
        let barHeight = 14.0
        let groupGap = 18.0
        let left = 70.0
        let width = 520.0
        let labelWidth = 140.0
        var y = 40.0
        var body = ""
        for workload in workloads {
            let present = backends.compactMap { b in measurement(b, workload).flatMap { $0.samplesMs.isEmpty ? nil : (b, $0.medianMs) } }
            guard let fastest = present.map(\.1).min(), fastest > 0 else { continue }
            body += "<text x=\"8\" y=\"\(y + barHeight)\" font-size=\"13\" font-weight=\"bold\">\(workload)</text>\n"
            for (backend, ms) in present {
                let length = max(2, width * fastest / ms)
                body += "<rect x=\"\(left)\" y=\"\(y)\" width=\"\(String(format: "%.1f", length))\" height=\"\(barHeight - 2)\" fill=\"\(colors[backend] ?? "#999")\"/>\n"
                body += "<text x=\"\(left + length + 4)\" y=\"\(y + barHeight - 3)\" font-size=\"11\">\(backend) \(Self.format(ms))</text>\n"
                y += barHeight
            }
            y += groupGap
        }
        let height = y + 10
        let total = left + width + labelWidth
        return """
            <svg xmlns="http://www.w3.org/2000/svg" width="\(Int(total))" height="\(Int(height))" font-family="sans-serif">
            <rect width="100%" height="100%" fill="white"/>
            <text x="8" y="20" font-size="14">Depot, \(records) records (\(build)): throughput relative to the fastest per workload — longer is better</text>
            \(body)</svg>
            """
    }
}
