package import DepotCore

/// Waits (polling, for at most `seconds`) until `lane` has nothing running or queued, and
/// says whether it got there: a task a lane's job resumed can run before the lane has
/// marked itself idle.
package func waitUntilIdle(_ lane: SerialLane, seconds: Int = 60) async throws -> Bool {
    let deadline = ContinuousClock.now + .seconds(seconds)
    while !lane.isIdle {
        guard ContinuousClock.now < deadline else { return false }
        try await Task.sleep(for: .milliseconds(1))
    }
    return true
}
