import CLibPQ
import Foundation
import Logging

/// Receives a connection's notices (libpq calls it on the thread running the statement) and
/// logs them: `WARNING` at `warning`, everything else the server sends this way (`NOTICE`,
/// `INFO`, `LOG`, `DEBUG`) at `debug`.
final class NoticeSink: Sendable {
    let logger: Logger
    let redaction: PGRedaction

    init(logger: Logger, redaction: PGRedaction) {
        self.logger = logger
        self.redaction = redaction
    }

    func receive(_ result: OpaquePointer) {
        func field(_ code: Character) -> String? { errorField(code, of: result) }
        // 'V': the severity, never localized.
        let severity = field("V") ?? field("S") ?? "NOTICE"
        let level: Logger.Level = severity == "WARNING" ? .warning : .debug
        guard logger.logLevel <= level else { return }
        let message = redaction.redact(field("M") ?? String(cString: PQresultErrorMessage(result)).trimmingCharacters(in: .whitespacesAndNewlines))
        var metadata: Logger.Metadata = ["postgres.severity": .string(severity)]
        if let state = field("C") { metadata["postgres.sqlstate"] = .string(state) }
        logger.log(level: level, "PostgreSQL \(severity.lowercased()): \(message)", metadata: metadata)
    }
}
