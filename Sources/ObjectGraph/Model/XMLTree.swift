import Foundation
#if canImport(FoundationXML)
import FoundationXML
#endif

/// A parsed XML element: just what the model loader needs (name, attributes, child elements, position).
final class XMLElementNode {
    let name: String
    let attributes: [String: String]
    let line: Int
    var children: [XMLElementNode] = []

    init(name: String, attributes: [String: String], line: Int) {
        self.name = name
        self.attributes = attributes
        self.line = line
    }

    subscript(attribute: String) -> String? { attributes[attribute] }

    /// Whether a Core Data boolean attribute (`"YES"`) is set.
    func flag(_ attribute: String) -> Bool { attributes[attribute] == "YES" }

    func children(named name: String) -> [XMLElementNode] { children.filter { $0.name == name } }

    /// Parses a whole document into its root element.
    static func parse(_ data: Data) throws -> XMLElementNode {
        try checkBytes(data)
        let builder = TreeBuilder()
        let parser = XMLParser(data: data)
        parser.delegate = builder
        parser.shouldProcessNamespaces = false
        // On Linux, parse() can return true after a recoverable error; the delegate records the first one.
        let succeeded = parser.parse()
        if let failure = builder.failure {
            throw failure
        }
        guard succeeded, parser.parserError == nil, let root = builder.root else {
            let reason = parser.parserError.map { "\($0.localizedDescription)" } ?? "no root element"
            throw XMLSyntaxError(line: parser.lineNumber, column: parser.columnNumber, reason: reason)
        }
        return root
    }

    /// Refuses what Foundation's `XMLParser` on Linux stops the program on (both found by fuzzing the model loader),
    /// naming where: bytes that are not UTF-8 in a name, and a processing instruction without data (`<?name?>`).
    /// A model file is UTF-8 text whose only processing instruction is the XML declaration at its start, so any
    /// other `<?` is refused too.
    private static func checkBytes(_ data: Data) throws {
        var parser = Unicode.UTF8.ForwardParser()
        var bytes = data.makeIterator()
        var offset = 0, line = 1, column = 1
        var afterLessThan = false
        func isDeclaration(at start: Int) -> Bool {
            let hasMark = data.starts(with: [0xEF, 0xBB, 0xBF])
            guard start == (hasMark ? 5 : 2), data.count > start + 3 else { return false }
            let name = data[data.startIndex + start..<data.startIndex + start + 3]
            let after = data[data.startIndex + start + 3]
            return name.elementsEqual("xml".utf8) && [0x20, 0x09, 0x0A, 0x0D].contains(after)
        }
        while true {
            switch parser.parseScalar(from: &bytes) {
            case .valid(let scalar):
                let byte = scalar.count == 1 ? scalar.first! : 0x80
                // The XML declaration: "<?xml " at the very start, or after a byte order mark.
                if afterLessThan, byte == UInt8(ascii: "?"), !isDeclaration(at: offset + 1) {
                    throw XMLSyntaxError(line: line, column: column - 1,
                                         reason: "a processing instruction (<?…?>), which a Core Data model file does not have")
                }
                afterLessThan = byte == UInt8(ascii: "<")
                offset += scalar.count
                if byte == UInt8(ascii: "\n") { line += 1; column = 1 } else { column += 1 }
            case .emptyInput:
                return
            case .error:
                throw XMLSyntaxError(line: line, column: column,
                                     reason: "the byte at offset \(offset) is not UTF-8; a Core Data model file is UTF-8 text")
            }
        }
    }

    private final class TreeBuilder: NSObject, XMLParserDelegate {
        var root: XMLElementNode?
        var failure: XMLSyntaxError?
        private var stack: [XMLElementNode] = []

        func parser(_ parser: XMLParser, parseErrorOccurred parseError: any Error) {
            if failure == nil {
                let code = (parseError as NSError).code
                failure = XMLSyntaxError(line: parser.lineNumber, column: parser.columnNumber,
                                         reason: "parser error \(code) (\(Self.reasons[code] ?? "see libxml2's error codes"))")
            }
        }

        private static let reasons: [Int: String] = [
            4: "the document is empty", 5: "the document ended early", 41: "an attribute is not closed",
            73: "a tag is not closed", 76: "an end tag does not match its start tag", 111: "an entity is not defined",
        ]

        func parser(_ parser: XMLParser, didStartElement elementName: String, namespaceURI: String?,
                    qualifiedName: String?, attributes: [String: String]) {
            let node = XMLElementNode(name: elementName, attributes: attributes, line: parser.lineNumber)
            if let parent = stack.last { parent.children.append(node) } else { root = node }
            stack.append(node)
        }

        func parser(_ parser: XMLParser, didEndElement elementName: String, namespaceURI: String?, qualifiedName: String?) {
            if !stack.isEmpty { stack.removeLast() }
        }
    }
}

struct XMLSyntaxError: Error, CustomStringConvertible {
    let line: Int
    let column: Int
    let reason: String
    var description: String { "the XML is not well-formed at line \(line), column \(column): \(reason)" }
}
