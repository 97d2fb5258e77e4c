import Depot
import Foundation
import Hummingbird

/// Every error the API answers with: a status and a JSON body
/// `{"error": {"code": "...", "message": "..."}}` that says what to change.
public struct APIError: HTTPResponseError, Sendable {
    public let status: HTTPResponse.Status
    public let code: String
    public let message: String
    /// Seconds, for a 503 the client may retry.
    public var retryAfter: Int?

    public init(_ status: HTTPResponse.Status, code: String, _ message: String, retryAfter: Int? = nil) {
        self.status = status
        self.code = code
        self.message = message
        self.retryAfter = retryAfter
    }

    static func badRequest(_ message: String) -> APIError { APIError(.badRequest, code: "badRequest", message) }

    static func notFound(_ what: String, _ id: UUID) -> APIError {
        APIError(.notFound, code: "notFound", "No \(what) has the id \(id.uuidString).")
    }

    /// The HTTP meaning of a store error. Client mistakes keep Depot's message, which names
    /// the attribute and value; server-side failures answer 500 without internals (they are
    /// logged instead).
    init(_ error: DepotError) {
        switch error.code {
        case .notFound: self.init(.notFound, code: error.code.description, error.message)
        case .duplicateKey, .deleteDenied: self.init(.conflict, code: error.code.description, error.message)
        case .missingReference: self.init(.unprocessableContent, code: error.code.description, error.message)
        case .invalidPredicate, .invalidValue, .conversionFailed:
            self.init(.badRequest, code: error.code.description, error.message)
        case .busy: self.init(.serviceUnavailable, code: error.code.description, "The store is busy; try again.", retryAfter: 1)
        case .closed: self.init(.serviceUnavailable, code: error.code.description, "The service is shutting down.", retryAfter: 1)
        default: self.init(.internalServerError, code: "internal", "The request failed inside the service; it has been logged.")
        }
    }

    public func response(from request: Request, context: some RequestContext) throws -> Response {
        let data = try JSONEncoder().encode(ErrorBody(error: .init(code: code, message: message)))
        var headers: HTTPFields = [.contentType: "application/json; charset=utf-8"]
        if let retryAfter { headers[.retryAfter] = String(retryAfter) }
        return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: data)))
    }
}

/// The JSON shape of every error answer.
private struct ErrorBody: Encodable {
    struct Detail: Encodable {
        let code: String
        let message: String
    }
    let error: Detail
}

/// Turns a `DepotError` a handler throws into its ``APIError`` and logs the ones that are
/// the service's fault, with the request's id.
struct DepotErrorMiddleware<Context: RequestContext>: RouterMiddleware {
    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        do {
            return try await next(request, context)
        } catch let error as DepotError {
            let answer = APIError(error)
            if answer.status == .internalServerError {
                context.logger.error("Store failure", metadata: ["depot.code": "\(error.code)", "depot.message": "\(error.message)"])
            }
            throw answer
        } catch let error as DecodingError {
            throw APIError.badRequest("The request body is not valid: \(Self.describe(error))")
        } catch let error as HTTPError {
            // Hummingbird's own refusals (a body over the size limit, say), in this API's shape.
            throw APIError(error.status, code: error.status == .contentTooLarge ? "tooLarge" : "badRequest", error.body ?? error.status.reasonPhrase)
        }
    }

    /// A decoding error's path and reason, without Foundation's debug dump.
    static func describe(_ error: DecodingError) -> String {
        func path(_ context: DecodingError.Context) -> String {
            let keys = context.codingPath.map { $0.intValue.map { "[\($0)]" } ?? $0.stringValue }
            return keys.isEmpty ? "the body" : keys.joined(separator: ".")
        }
        switch error {
        case .keyNotFound(let key, let context):
            return "\(context.codingPath.isEmpty ? "" : path(context) + ".")\(key.stringValue) is missing."
        case .typeMismatch(let type, let context): return "\(path(context)) must be a \(type)."
        case .valueNotFound(let type, let context): return "\(path(context)) must be a \(type), not null."
        case .dataCorrupted(let context):
            // A syntax error has no path; its underlying error is Foundation's parser message.
            return context.codingPath.isEmpty ? "it is not JSON (\(context.debugDescription))." : "\(path(context)): \(context.debugDescription)"
        @unknown default: return "it could not be decoded."
        }
    }
}
