/// Polls `condition` every `interval` until it holds or `seconds` have passed, and says
/// whether it held: the wait for work another thread or process must do. The bound is a
/// deadline, not a count of sleeps, and a minute by default: a loaded machine (the whole
/// suite at once, the Thread Sanitizer) can be slow to run that work, while a store that
/// works answers in milliseconds and the poll returns then.
package func eventually(
    within seconds: Int = 60, every interval: Duration = .milliseconds(10), _ condition: () async throws -> Bool
) async throws -> Bool {
    let deadline = ContinuousClock.now + .seconds(seconds)
    while ContinuousClock.now < deadline {
        if try await condition() { return true }
        try await Task.sleep(for: interval)
    }
    return try await condition()
}
