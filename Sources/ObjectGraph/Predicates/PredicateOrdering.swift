import Foundation

/// How predicate values compare: numbers as numbers (whatever their kind), dates by time, strings with the
/// comparison's case and diacritic options, NULL equal only to NULL.
enum PredicateOrdering {
    /// Whether two values are equal under `options`.
    static func equal(_ lhs: PredicateValue, _ rhs: PredicateValue, options: ComparisonOptions) -> Bool {
        switch (lhs, rhs) {
        case (.null, .null): return true
        case (.null, _), (_, .null): return false
        case (.string(let a), .string(let b)): return StringMatching.fold(a, options) == StringMatching.fold(b, options)
        case (.array(let a), .array(let b)):
            return a.count == b.count && zip(a, b).allSatisfy { equal($0, $1, options: options) }
        default:
            if let order = numericOrder(lhs, rhs) { return order == 0 }
            return lhs == rhs
        }
    }

    /// The order of two non-NULL values, or `nil` when their kinds cannot be ordered against each other.
    static func order(_ lhs: PredicateValue, _ rhs: PredicateValue, options: ComparisonOptions) -> Int? {
        if let order = numericOrder(lhs, rhs) { return order }
        switch (lhs, rhs) {
        case (.string(let a), .string(let b)):
            return canonicalOrder(StringMatching.fold(a, options), StringMatching.fold(b, options))
        case (.date(let a), .date(let b)): return a == b ? 0 : a < b ? -1 : 1
        case (.uuid(let a), .uuid(let b)): return a.uuidString == b.uuidString ? 0 : a.uuidString < b.uuidString ? -1 : 1
        case (.data(let a), .data(let b)): return a == b ? 0 : a.lexicographicallyPrecedes(b) ? -1 : 1
        case (.uri(let a), .uri(let b)):
            return a.absoluteString == b.absoluteString ? 0 : a.absoluteString < b.absoluteString ? -1 : 1
        default: return nil
        }
    }

    /// The order of two strings by the Unicode scalars of their canonical composition (NFC), which is the byte order
    /// of their NFC UTF-8 — the order index keys keep them in. Canonically equivalent strings (`"é"` precomposed or
    /// as `"e"` + U+0301) are equal, and order the same against every other string. (Swift's `<` is not consistent
    /// for such pairs on every platform, so it is not used.)
    static func canonicalOrder(_ lhs: String, _ rhs: String) -> Int {
        if let order = stableOrder(lhs, rhs) { return order }
        let x = lhs.precomposedStringWithCanonicalMapping.utf8, y = rhs.precomposedStringWithCanonicalMapping.utf8
        return x.elementsEqual(y) ? 0 : x.lexicographicallyPrecedes(y) ? -1 : 1
    }

    /// The byte order of two strings that are their own NFC (``StringFolding/isOwnComposition(_:)``); `nil` for any
    /// other pair.
    private static func stableOrder(_ lhs: String, _ rhs: String) -> Int? {
        var lhs = lhs, rhs = rhs
        return lhs.withUTF8 { x in
            rhs.withUTF8 { y -> Int? in
                var index = 0
                let common = min(x.count, y.count)
                while index < common, x[index] == y[index] { index += 1 }
                guard StringFolding.isOwnComposition(UnsafeRawBufferPointer(x)),
                      StringFolding.isOwnComposition(UnsafeRawBufferPointer(y)) else { return nil }
                if index == common { return x.count == y.count ? 0 : x.count < y.count ? -1 : 1 }
                return x[index] < y[index] ? -1 : 1
            }
        }
    }

    /// The order of two numeric values (integers, Booleans, doubles, decimals), exactly where possible.
    static func numericOrder(_ lhs: PredicateValue, _ rhs: PredicateValue) -> Int? {
        guard let a = Number(lhs), let b = Number(rhs) else { return nil }
        switch (a.kind, b.kind) {
        case (.integer, .integer):
            return a.integer == b.integer ? 0 : a.integer < b.integer ? -1 : 1
        case (.decimal, _), (_, .decimal):
            if let x = a.decimal, let y = b.decimal { return x == y ? 0 : x < y ? -1 : 1 }
            fallthrough
        default:
            if a.double.isNaN || b.double.isNaN { return a.double.isNaN && b.double.isNaN ? 0 : (a.double.isNaN ? -1 : 1) }
            return a.double == b.double ? 0 : a.double < b.double ? -1 : 1
        }
    }
}

/// String operations with `[c]`, `[d]` and `[n]` options.
enum StringMatching {
    /// The string with case and/or diacritics folded away, as the options ask (see ``StringFolding``).
    static func fold(_ text: String, _ options: ComparisonOptions) -> String {
        StringFolding.fold(text, caseInsensitive: options.contains(.caseInsensitive),
                           diacriticInsensitive: options.contains(.diacriticInsensitive))
    }

    static func contains(_ haystack: String, _ needle: String, options: ComparisonOptions) -> Bool {
        needle.isEmpty || fold(haystack, options).contains(fold(needle, options))
    }

    static func hasPrefix(_ text: String, _ prefix: String, options: ComparisonOptions) -> Bool {
        fold(text, options).hasPrefix(fold(prefix, options))
    }

    static func hasSuffix(_ text: String, _ suffix: String, options: ComparisonOptions) -> Bool {
        fold(text, options).hasSuffix(fold(suffix, options))
    }

    /// LIKE: `*` matches any run of characters (newlines included), `?` exactly one, `\` escapes the next
    /// character; everything else is literal. The whole string must match.
    static func like(_ text: String, _ pattern: String, options: ComparisonOptions) -> Bool {
        let subject = Array(fold(text, options))
        var tokens: [LikeToken] = []
        var escaping = false
        for character in fold(pattern, options) {
            if escaping { tokens.append(.literal(character)); escaping = false; continue }
            switch character {
            case "\\": escaping = true
            case "*": if tokens.last != .anyRun { tokens.append(.anyRun) }
            case "?": tokens.append(.anyOne)
            default: tokens.append(.literal(character))
            }
        }
        if escaping { tokens.append(.literal("\\")) }
        // Greedy matching with one backtrack point per star: linear in practice, no exponential blow-up.
        var s = 0, p = 0
        var starP = -1, starS = 0
        while s < subject.count {
            if p < tokens.count, tokens[p] == .anyOne || tokens[p] == .literal(subject[s]) {
                s += 1; p += 1
            } else if p < tokens.count, tokens[p] == .anyRun {
                starP = p; starS = s; p += 1
            } else if starP >= 0 {
                p = starP + 1; starS += 1; s = starS
            } else {
                return false
            }
        }
        while p < tokens.count, tokens[p] == .anyRun { p += 1 }
        return p == tokens.count
    }

    private enum LikeToken: Equatable {
        case literal(Character)
        case anyOne
        case anyRun
    }

    /// MATCHES: an ICU regular expression that must match the whole string; `nil` for an invalid expression. The
    /// expression is compiled once per pattern and options (``CompiledExpressions``), not once per row it is
    /// evaluated on.
    static func matches(_ text: String, _ pattern: String, options: ComparisonOptions) -> Bool? {
        let subject = options.contains(.diacriticInsensitive) ? fold(text, [.diacriticInsensitive]) : text
        guard let regex = CompiledExpressions.shared.expression(pattern, caseInsensitive: options.contains(.caseInsensitive),
                                                                  diacriticInsensitive: options.contains(.diacriticInsensitive))
        else { return nil }
        return regex.firstMatch(in: subject, options: [], range: NSRange(subject.startIndex..., in: subject)) != nil
    }
}

/// The regular expressions of MATCHES comparisons, compiled once each: a predicate evaluated on a million rows
/// compiles its pattern once, not a million times (and an invalid pattern is refused once: Foundation on Linux keeps
/// memory for each refusal). At most ``capacity`` are kept; then the table starts again.
final class CompiledExpressions: @unchecked Sendable {
    static let shared = CompiledExpressions()
    /// How many patterns are kept.
    static let capacity = 256

    private struct Key: Hashable {
        let pattern: String
        let caseInsensitive: Bool
        let diacriticInsensitive: Bool
    }

    /// `nil` for a pattern that does not compile. (`NSRegularExpression` is immutable and safe to share.)
    private let compiled = Locked<[Key: NSRegularExpression?]>([:])

    /// The whole-string expression for `pattern` (folded first when `diacriticInsensitive`), or `nil` when it does
    /// not compile.
    func expression(_ pattern: String, caseInsensitive: Bool, diacriticInsensitive: Bool) -> NSRegularExpression? {
        let key = Key(pattern: pattern, caseInsensitive: caseInsensitive, diacriticInsensitive: diacriticInsensitive)
        if let known = compiled.withLock({ $0[key] }) { return known }
        var options: NSRegularExpression.Options = [.anchorsMatchLines]
        if caseInsensitive { options.insert(.caseInsensitive) }
        let expression = diacriticInsensitive ? StringMatching.fold(pattern, [.diacriticInsensitive]) : pattern
        // \A and \z anchor the whole string; ^ and $ inside the pattern still match at line boundaries.
        let regex = try? NSRegularExpression(pattern: "\\A(?:" + expression + ")\\z", options: options)
        compiled.withLock { table in
            if table.count >= Self.capacity { table.removeAll(keepingCapacity: true) }
            table[key] = .some(regex)
        }
        return regex
    }
}
