import Foundation
import ObjectGraph

/// Rows of text cells laid out in aligned columns under a header.
struct TextTable {
    let header: [String]
    /// Whether each column is aligned right (numbers) rather than left.
    let alignRight: [Bool]
    let rows: [[String]]

    var lines: [String] {
        var widths = header.map(\.count)
        for row in rows {
            for (column, cell) in row.enumerated() where column < widths.count { widths[column] = max(widths[column], cell.count) }
        }
        func line(_ cells: [String]) -> String {
            cells.enumerated().map { column, cell in
                let padding = String(repeating: " ", count: widths[column] - cell.count)
                return column < alignRight.count && alignRight[column] ? padding + cell : cell + padding
            }.joined(separator: "  ").trimmingSuffix()
        }
        return [line(header), line(widths.map { String(repeating: "-", count: $0) })] + rows.map(line)
    }
}

extension String {
    func trimmingSuffix() -> String {
        var text = self
        while text.last == " " { text.removeLast() }
        return text
    }
}

/// A fetched value as text: what a table or CSV cell shows (NULL is empty in CSV, `NULL` in a table), written as
/// the atomic stores and `import` read it back (dates in ISO 8601 with the fraction digits they need, infinities as
/// `Infinity`).
func cellText(_ value: PredicateValue) -> String? {
    switch value {
    case .null: nil
    case .boolean(let value): value ? "true" : "false"
    case .integer(let value): String(value)
    case .double(let value): AttributeText.format(double: value)
    case .decimal(let value): "\(value)"
    case .string(let value): value
    case .date(let value): AttributeText.format(date: value)
    case .data(let value): value.base64EncodedString()
    case .uuid(let value): value.uuidString
    case .uri(let value): value.absoluteString
    case .array(let values): "[" + values.map { cellText($0) ?? "NULL" }.joined(separator: ", ") + "]"
    case .dictionary(let values): "{" + values.sorted { $0.key < $1.key }.map { "\($0.key): \(cellText($0.value) ?? "NULL")" }.joined(separator: ", ") + "}"
    case .object(let object): (object.base as? ManagedObjectID)?.uriRepresentation.absoluteString ?? "\(object.base)"
    }
}

/// A fetched value as JSON: numbers and booleans as such, NULL as `null`, the rest as strings (dates in ISO 8601,
/// data in base64, object IDs as their URIs).
func jsonText(_ value: PredicateValue) -> String {
    switch value {
    case .null: return "null"
    case .boolean(let value): return value ? "true" : "false"
    case .integer(let value): return String(value)
    case .double(let value): return value.isFinite ? String(value) : jsonString(AttributeText.format(double: value))
    case .decimal(let value): return "\(value)"
    case .array(let values): return "[" + values.map(jsonText).joined(separator: ",") + "]"
    default: return jsonString(cellText(value) ?? "")
    }
}

/// `text` as a JSON string literal, escaped as the JSON store writes strings.
func jsonString(_ text: String) -> String {
    var result = ""
    JSONText.appendString(text, to: &result)
    return result
}

/// `text` as an RFC 4180 CSV field: quoted when it holds a comma, a quote or a line break.
func csvField(_ text: String) -> String {
    guard text.contains(where: { $0 == "," || $0 == "\"" || $0 == "\n" || $0 == "\r" }) else { return text }
    return "\"" + text.replacingOccurrences(of: "\"", with: "\"\"") + "\""
}

/// Writes result rows (each a dictionary by column) in `format`: an aligned table, JSON Lines (one object a line,
/// keys in column order) or CSV with a header.
func writeRows(_ rows: [[String: PredicateValue]], columns: [String], format: OutputFormat) {
    switch format {
    case .jsonl, .json:
        for row in rows {
            emit("{" + columns.map { jsonString($0) + ":" + jsonText(row[$0] ?? .null) }.joined(separator: ",") + "}")
        }
    case .csv:
        emit(columns.map(csvField).joined(separator: ","))
        for row in rows { emit(columns.map { csvField(row[$0].flatMap(cellText) ?? "") }.joined(separator: ",")) }
    case .table, .text:
        let cells = rows.map { row in columns.map { row[$0].flatMap(cellText) ?? "NULL" } }
        let numeric = columns.map { column in
            rows.allSatisfy { row in
                switch row[column] ?? .null {
                case .integer, .double, .decimal, .null: true
                default: false
                }
            }
        }
        TextTable(header: columns, alignRight: numeric, rows: cells).lines.forEach(emit)
        emit("(\(rows.count) row\(rows.count == 1 ? "" : "s"))")
    }
}
