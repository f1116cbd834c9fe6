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
