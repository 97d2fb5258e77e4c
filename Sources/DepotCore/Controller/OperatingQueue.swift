public import Dispatch

/// Where a ``Controller`` delivers completion handlers.
///
/// async methods need no queue: they resume the awaiting task.
public enum OperatingQueue: Sendable {
    /// The main queue, for work that updates what a user sees. In a command-line program
    /// main-queue work runs only while the main thread is in `dispatchMain()` or an async
    /// `main`.
    case main
    /// Depot's shared background queue (concurrent). The default.
    case background
    /// A queue of the caller's choosing; a serial queue gets completions in submission
    /// order.
    case custom(DispatchQueue)

    /// The queue behind this choice.
    public var queue: DispatchQueue {
        switch self {
        case .main: .main
        case .background: Self.sharedBackground
        case .custom(let queue): queue
        }
    }

    /// The queue behind ``background``. Completions delivered there can be recognised with
    /// ``backgroundKey``.
    public static let sharedBackground: DispatchQueue = {
        let queue = DispatchQueue(label: "depot.background", qos: .utility, attributes: .concurrent)
        queue.setSpecific(key: backgroundKey, value: true)
        return queue
    }()

    /// Set to `true` on ``sharedBackground``.
    public static let backgroundKey = DispatchSpecificKey<Bool>()
}
