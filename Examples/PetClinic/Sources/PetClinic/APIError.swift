import Depot
import Foundation
import Hummingbird
import NIOCore

/// Every error the API answers with: a status and a JSON body
/// `{"error": {"code": "...", "message": "..."}}`. The code names the error for a program
/// (one of ``Code``); the message says what to change, in the API's words: field names and
/// limits, never the server's types or the store's texts.
public struct APIError: HTTPResponseError, Sendable {
    /// The codes this API answers with. README's "Errors" table lists them.
    public enum Code: String, Sendable {
        /// 400: the body is not JSON, or not the JSON value the route takes.
        case invalidJSON
        /// 400: a field or query parameter is missing, of the wrong kind, or outside its rules.
        case validation
        /// 404: no such record, or no such route (also a known path with a method it does not take).
        case notFound
        /// 409: a unique value (an owner's email) is already used.
        case conflict
        /// 413: the body is over the route's limit.
        case payloadTooLarge
        /// 415: the body is declared as something other than `application/json`.
        case unsupportedMediaType
        /// 422: a record the body refers to (a pet's owner) does not exist.
        case referenceNotFound
        /// 503: the store is busy; try again after `Retry-After` seconds.
        case busy
        /// 503: the service is shutting down.
        case shuttingDown
        /// 500: a failure inside the service, logged with the request's id.
        case `internal`
    }

    public let status: HTTPResponse.Status
    public let code: Code
    public let message: String
    /// Seconds, for a 503 the client may retry.
    public var retryAfter: Int?

    public init(_ status: HTTPResponse.Status, _ code: Code, _ message: String, retryAfter: Int? = nil) {
        self.status = status
        self.code = code
        self.message = message
        self.retryAfter = retryAfter
    }

    static func validation(_ message: String) -> APIError { APIError(.badRequest, .validation, message) }

    static func invalidJSON(_ message: String) -> APIError { APIError(.badRequest, .invalidJSON, message) }

    static func notFound(_ what: String, _ id: UUID) -> APIError {
        APIError(.notFound, .notFound, "No \(what) has the id \(id.uuidString).")
    }

    static func payloadTooLarge(limit: Int, _ advice: String = "") -> APIError {
        APIError(.contentTooLarge, .payloadTooLarge, "This route takes a body of at most \(limit >> 20) MiB\(advice).")
    }

    static let unexpected = APIError(.internalServerError, .internal, "The request failed inside the service; it has been logged.")

    /// What a store refusal means to a client of this API: every `DepotError` a handler
    /// throws is answered here. Depot's messages are written for the developer (they name
    /// record types and quote the engine), so none of them reaches the client.
    ///
    /// The messages can name fields because this API has one unique field a client sets
    /// (`Owner.email`; ids are the server's) and one reference a client names in a body
    /// (`Pet.ownerID`; routes whose parent is in the path answer 404 for it themselves). A
    /// new unique attribute or reference needs its words here.
    init(_ error: DepotError) {
        switch error.code {
        case .duplicateKey: self.init(.conflict, .conflict, "email is already used by another owner.")
        case .deleteDenied: self.init(.conflict, .conflict, "Other records still refer to this one.")
        case .missingReference: self.init(.unprocessableContent, .referenceNotFound, "ownerID names no owner; create the owner first.")
        case .notFound: self.init(.notFound, .notFound, "The record does not exist (it may have been deleted).")
        case .invalidPredicate: self.init(.badRequest, .validation, "The query's parameters do not fit together; check cursor and sort.")
        case .invalidValue, .conversionFailed: self.init(.badRequest, .validation, "A value in the request cannot be stored.")
        case .busy: self.init(.serviceUnavailable, .busy, "The store is busy; try again.", retryAfter: 1)
        case .closed: self.init(.serviceUnavailable, .shuttingDown, "The service is shutting down; try again on another instance or later.", retryAfter: 1)
        default: self = .unexpected
        }
    }

    /// Hummingbird's own refusals (no route, a body over a limit) in this API's shape.
    init(_ status: HTTPResponse.Status, request: Request) {
        switch status {
        case .notFound:
            // Hummingbird's router answers 404 for an unknown path and for a known path with
            // a method it has no handler for: it does not tell the two apart.
            self.init(.notFound, .notFound, "No route matches \(request.method.rawValue) \(request.uri.path).")
        case .contentTooLarge: self.init(.contentTooLarge, .payloadTooLarge, "The request body is over this route's limit.")
        case .unsupportedMediaType: self.init(.unsupportedMediaType, .unsupportedMediaType, "This route takes application/json.")
        case .badRequest: self.init(.badRequest, .validation, "The request is not valid.")
        default: self = status.code >= 500 ? .unexpected : APIError(status, .validation, status.reasonPhrase)
        }
    }

    public func response(from request: Request, context: some RequestContext) throws -> Response {
        let data = try JSONEncoder().encode(ErrorBody(error: .init(code: code.rawValue, message: message)))
        var headers: HTTPFields = [.contentType: "application/json; charset=utf-8"]
        if let retryAfter { headers[.retryAfter] = String(retryAfter) }
        return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: data)))
    }

    /// A decoding error in the API's words: the field's path and the JSON kind it takes.
    static func decoding(_ error: DecodingError) -> APIError {
        func path(_ context: DecodingError.Context) -> String {
            let keys = context.codingPath.map { $0.intValue.map { "[\($0)]" } ?? $0.stringValue }
            return keys.isEmpty ? "The body" : keys.joined(separator: ".").replacingOccurrences(of: ".[", with: "[")
        }
        func field(_ context: DecodingError.Context) -> String? { context.codingPath.last?.stringValue }
        switch error {
        case .keyNotFound(let key, let context):
            return .validation("\(context.codingPath.isEmpty ? "" : path(context) + ".")\(key.stringValue) is missing.")
        case .typeMismatch(let type, let context):
            return .validation("\(path(context)) must be \(kind(of: type, field: field(context))).")
        case .valueNotFound(let type, let context):
            return .validation("\(path(context)) must be \(kind(of: type, field: field(context))), not null.")
        case .dataCorrupted(let context):
            // No path: the text is not JSON at all (a syntax error). Fields whose form the
            // decoder would report without their path (dates) are read by their input type.
            guard !context.codingPath.isEmpty else { return .invalidJSON("The body is not JSON.") }
            return .validation("\(path(context)) must be \(kind(of: String.self, field: field(context))).")
        @unknown default:
            return .invalidJSON("The body could not be read as JSON.")
        }
    }

    /// The JSON kind a field takes, as a client reads it: ids and dates are strings of a
    /// form, numbers are whole or not.
    private static func kind(of type: Any.Type, field: String?) -> String {
        if let field, field == "id" || field.hasSuffix("ID") { return "a UUID string such as \"3F2504E0-4F89-11D3-9A0C-0305E82C3301\"" }
        if field == "date" { return "an ISO 8601 date such as \"2024-05-01T09:30:00Z\"" }
        switch ObjectIdentifier(type) {
        case ObjectIdentifier(String.self): return "a string"
        case ObjectIdentifier(Int.self), ObjectIdentifier(Int64.self), ObjectIdentifier(Int32.self): return "a whole number"
        case ObjectIdentifier(Double.self), ObjectIdentifier(Float.self): return "a number"
        case ObjectIdentifier(Bool.self): return "true or false"
        case ObjectIdentifier([String: Any].self): return "an object"
        case ObjectIdentifier([Any].self): return "an array"
        default: return "a value of another kind"
        }
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

/// Answers every error a handler, the router or Hummingbird throws with an ``APIError``:
/// store refusals by ``APIError/init(_:)``, decoding errors by field, Hummingbird's own
/// (no route, a body over its limit) by status, and anything else as a 500 that is logged
/// with the request's id.
struct APIErrorMiddleware<Context: RequestContext>: RouterMiddleware {
    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        do {
            return try await next(request, context)
        } catch let error as APIError {
            throw error
        } catch let error as DepotError {
            let answer = APIError(error)
            if answer.status == .internalServerError {
                context.logger.error("Store failure", metadata: ["depot.code": "\(error.code)", "depot.message": "\(error.message)"])
            }
            throw answer
        } catch let error as DecodingError {
            throw APIError.decoding(error)
        } catch is NIOTooManyBytesError {
            throw APIError(.contentTooLarge, request: request)
        } catch let error as any HTTPResponseError {
            throw APIError(error.status, request: request)
        } catch {
            context.logger.error("Request failed", metadata: ["error": "\(String(reflecting: error))"])
            throw APIError.unexpected
        }
    }
}
