import CLibPQ
import DepotCore

/// A PostgreSQL failure with its SQLSTATE, before it becomes a `DepotError`.
struct PGFailure: Error {
    let sqlState: String
    let message: String
    let detail: String?
    let constraint: String?

    /// Serialization failures and deadlocks: the transaction is retried from the start.
    var isRetryable: Bool { sqlState == "40001" || sqlState == "40P01" }

    /// The session is gone: a connection failure (class 08), or the server ending it
    /// (57P01 administrator shutdown, 57P02 crash shutdown).
    var isSessionLost: Bool { sqlState.hasPrefix("08") || sqlState == "57P01" || sqlState == "57P02" }

    func depotError(_ context: String) -> DepotError {
        let text = "\(context): PostgreSQL \(sqlState): \(message)\(detail.map { " (\($0))" } ?? "")"
        let code: DepotError.Code
        switch sqlState {
        case "23505": code = .duplicateKey
        case "23503": code = .missingReference
        case "23502", "23514": code = .invalidValue
        case "40001", "40P01", "55P03", "57014", "53300", "57P03": code = .busy
        case "53100": code = .storeFull
        case "42501", "28000", "28P01": code = .permissionDenied
        case "42P01", "42703", "0A000": code = .schemaMismatch
        // An index row over PostgreSQL's limit (a long value in a key, unique or indexed
        // column), a string the database's encoding cannot hold.
        case "54000", "22P05", "22021": code = .invalidValue
        default:
            if sqlState.hasPrefix("08") || sqlState.hasPrefix("57P") || sqlState.hasPrefix("58") {
                code = .io
            } else if sqlState.hasPrefix("22") {
                code = .invalidValue
            } else {
                code = .backend
            }
        }
        return DepotError(code, text)
    }
}

/// One field of an error or notice result (`PQresultErrorField`: 'C' the SQLSTATE, 'M' the
/// message, 'D' the detail, 'n' the constraint, 'V' the severity), or `nil` when absent.
func errorField(_ code: Character, of result: OpaquePointer) -> String? {
    guard let ascii = code.asciiValue, let value = PQresultErrorField(result, Int32(ascii)) else { return nil }
    return String(cString: value)
}
