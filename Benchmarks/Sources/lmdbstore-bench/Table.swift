import Foundation

/// The comparison as Markdown-friendly text tables, one per dataset size.
enum Table {
    static let systems = ["LMDBStore", "GRDB", "raw LMDB"]

    static func render(_ results: [Measurement], notes: [String], settings: String) -> String {
        var lines: [String] = ["Settings: \(settings)", ""]
        lines += notes
        for size in Array(Set(results.map(\.objects))).sorted() {
            lines += ["", "### \(size.formatted()) objects", ""]
            lines.append("| workload | system | ops/s | p50 | p99 | p99.9 | LMDBStore vs GRDB | LMDBStore vs raw LMDB |")
            lines.append("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
            let forSize = results.filter { $0.objects == size }
            var seen: [String] = []
            for result in forSize where !seen.contains(result.workload) { seen.append(result.workload) }
            for workload in seen {
                let rows = forSize.filter { $0.workload == workload }
                let mine = rows.first { $0.system == "LMDBStore" }
                let grdb = rows.first { $0.system == "GRDB" }
                let raw = rows.first { $0.system == "raw LMDB" }
                for row in rows.sorted(by: { systems.firstIndex(of: $0.system)! < systems.firstIndex(of: $1.system)! }) {
                    let versusGRDB = row.system == "LMDBStore" ? grdb.map { ratio(row.opsPerSecond / $0.opsPerSecond) } ?? "" : ""
                    // How many times raw LMDB's throughput LMDBStore's is below it (or above, when a run's cache
                    // state favoured LMDBStore).
                    let versusRaw = row.system == "LMDBStore" ? raw.map { raw in
                        let factor = raw.opsPerSecond / row.opsPerSecond
                        return factor >= 1 ? String(format: "%.2f× slower", factor) : String(format: "%.2f× faster", 1 / factor)
                    } ?? "" : ""
                    lines.append("| \(row.system == (mine?.system ?? "") || rows.first?.system == row.system ? workload : "") | \(row.system) | "
                                 + "\(rate(row.opsPerSecond)) | \(latency(row.p50)) | \(latency(row.p99)) | \(latency(row.p999)) | \(versusGRDB) | \(versusRaw) |")
                }
                if let plan = mine?.plan { lines.append("| ↳ LMDBStore plan: `\(plan.replacingOccurrences(of: "|", with: "\\|"))` |  |  |  |  |  |  |  |") }
            }
        }
        return lines.joined(separator: "\n")
    }

    static func ratio(_ value: Double) -> String {
        value >= 1 ? String(format: "%.2f×", value) : String(format: "%.2f× (slower)", value)
    }

    static func rate(_ value: Double) -> String {
        if value >= 1_000_000 { return String(format: "%.2f M", value / 1_000_000) }
        if value >= 1_000 { return String(format: "%.1f K", value / 1_000) }
        return String(format: "%.2f", value)
    }

    static func latency(_ nanoseconds: Double?) -> String {
        guard let nanoseconds, nanoseconds.isFinite else { return "–" }
        if nanoseconds >= 1e9 { return String(format: "%.2f s", nanoseconds / 1e9) }
        if nanoseconds >= 1e6 { return String(format: "%.2f ms", nanoseconds / 1e6) }
        if nanoseconds >= 1e3 { return String(format: "%.1f µs", nanoseconds / 1e3) }
        return String(format: "%.0f ns", nanoseconds)
    }
}

/// A Markdown report with the tables and an SVG chart of throughput per workload, size and system.
enum Report {
    static func write(_ results: [Measurement], notes: [String], settings: String, to folder: URL) throws {
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        try svg(results).write(to: folder.appendingPathComponent("throughput.svg"), atomically: true, encoding: .utf8)
        let markdown = "# lmdbstore-bench results\n\n" + Table.render(results, notes: notes, settings: settings)
            + "\n\n![Throughput by workload, dataset size and system (log scale)](throughput.svg)\n"
        try markdown.write(to: folder.appendingPathComponent("REPORT.md"), atomically: true, encoding: .utf8)
    }

    static func svg(_ results: [Measurement]) -> String {
        let colors = ["LMDBStore": "#2a7ab0", "GRDB": "#d9822b", "raw LMDB": "#6a9f3a"]
        var workloads: [String] = []
        for result in results where !workloads.contains(result.workload) { workloads.append(result.workload) }
        let sizes = Array(Set(results.map(\.objects))).sorted()
        let barHeight = 9.0, labelWidth = 330.0, chartWidth = 520.0
        let maxRate = max(10, results.map(\.opsPerSecond).max() ?? 10)
        func width(_ rate: Double) -> Double { max(1, chartWidth * log10(max(1, rate)) / log10(maxRate)) }
        var y = 30.0
        var body = ""
        for workload in workloads {
            body += "<text x=\"4\" y=\"\(y + 10)\" font-size=\"11\" font-weight=\"bold\">\(escape(workload))</text>\n"
            y += 14
            for size in sizes {
                for system in Table.systems {
                    guard let result = results.first(where: { $0.workload == workload && $0.objects == size && $0.system == system }) else { continue }
                    body += "<text x=\"\(labelWidth - 6)\" y=\"\(y + barHeight - 1)\" font-size=\"9\" text-anchor=\"end\">\(system), \(size.formatted())</text>\n"
                    body += "<rect x=\"\(labelWidth)\" y=\"\(y)\" width=\"\(width(result.opsPerSecond))\" height=\"\(barHeight)\" fill=\"\(colors[system]!)\"/>\n"
                    body += "<text x=\"\(labelWidth + width(result.opsPerSecond) + 4)\" y=\"\(y + barHeight - 1)\" font-size=\"9\">\(Table.rate(result.opsPerSecond)) ops/s</text>\n"
                    y += barHeight + 2
                }
            }
            y += 8
        }
        return """
            <svg xmlns="http://www.w3.org/2000/svg" width="\(Int(labelWidth + chartWidth + 90))" height="\(Int(y + 10))" font-family="sans-serif">
            <rect width="100%" height="100%" fill="white"/>
            <text x="4" y="16" font-size="13" font-weight="bold">Throughput (ops/s, log scale) by workload, dataset size and system</text>
            \(body)</svg>
            """
    }

    static func escape(_ text: String) -> String {
        text.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;").replacingOccurrences(of: ">", with: "&gt;")
    }
}
