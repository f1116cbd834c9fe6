import Foundation
import Testing
@testable import lmdbstore_test_helper

/// The hostile trial's catalogue (issue 16): every case in a process of its own, so that a trap fails one case
/// instead of killing the test run. A case passes when it prints "ok" — the typed error that names the problem, or
/// the right answer — and, for the one documented stop, when the process stops with its message.
@Suite struct HostileInputTests {
    @Test(arguments: HostileCases.names)
    func badInputGetsATypedErrorOrTheRightAnswer(_ name: String) throws {
        // A sanitizer reserves terabytes of address space for its shadow memory, so a process whose address space is
        // limited cannot start under one (`make sanitize` sets LMDBSTORE_SANITIZER).
        if name == "mapSizeBeyondTheAddressSpace", ProcessInfo.processInfo.environment["LMDBSTORE_SANITIZER"] != nil { return }
        try runCase(name)
    }

    /// A disk that fills up during a save (a 1 MiB tmpfs: needs root and a sandbox that allows mounts).
    @Test(.enabled(if: HostileCases.canMountSmallDisks, "mounting a small tmpfs needs root and a sandbox that allows it"))
    func aSaveOnAFullDiskSaysTheDiskIsFullAndLosesNothing() throws {
        try runCase(HostileCases.fullDisk.name)
    }

    private func runCase(_ name: String) throws {
        let folder = StoreFolder()
        let process = Process()
        process.executableURL = URL(fileURLWithPath: helperPath())
        process.arguments = ["hostile", name, folder.url.path]
        let output = Pipe(), errors = Pipe()
        process.standardOutput = output
        process.standardError = errors
        try process.run()
        let said = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        let complained = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        if let message = HostileCases.named(name)?.stopsWith {
            #expect(process.terminationReason == .uncaughtSignal, "\(name) must stop the program: \(said)")
            #expect(complained.contains(message), "\(name) stops with a message naming the problem: \(complained)")
        } else {
            #expect(process.terminationReason == .exit && process.terminationStatus == 0,
                    "\(name): \(said)\(complained.isEmpty ? "" : " — stderr: " + complained.suffix(2000))")
            #expect(said.hasPrefix("ok: "), "\(name): \(said)")
        }
    }
}
