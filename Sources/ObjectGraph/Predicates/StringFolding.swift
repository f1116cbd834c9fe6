import Foundation

/// The one definition of case and diacritic folding, shared by `[c]`/`[d]` comparisons and by the LMDB store's
/// folded index keys, so that an index range and a row check always agree. It is spelled out in Unicode terms (not
/// "what Foundation's `String.folding` does"), so a reader of the store file in another language can fold a value
/// the same way (`Docs/FORMAT.md`, "Folded strings"):
///
/// 1. decompose the string canonically (NFD);
/// 2. for diacritic folding, drop every scalar whose general category is Mn (nonspacing mark);
/// 3. for case folding, replace every scalar by its full uppercase mapping, then every scalar of that by its full
///    lowercase mapping — both context-free (`ß` → `SS` → `ss`, `ﬁ` → `FI` → `fi`, `ς` → `Σ` → `σ`);
/// 4. compose the result canonically (NFC).
package enum StringFolding {
    /// `text` folded as `caseInsensitive` and `diacriticInsensitive` ask.
    package static func fold(_ text: String, caseInsensitive: Bool, diacriticInsensitive: Bool) -> String {
        guard caseInsensitive || diacriticInsensitive else { return text }
        if let ascii = foldASCII(text, caseInsensitive: caseInsensitive) { return ascii }
        var scalars = String.UnicodeScalarView()
        for scalar in text.decomposedStringWithCanonicalMapping.unicodeScalars {
            if diacriticInsensitive && scalar.properties.generalCategory == .nonspacingMark { continue }
            guard caseInsensitive else { scalars.append(scalar); continue }
            if !scalar.properties.changesWhenUppercased && !scalar.properties.changesWhenLowercased {
                scalars.append(scalar)
                continue
            }
            for upper in scalar.properties.uppercaseMapping.unicodeScalars {
                scalars.append(contentsOf: upper.properties.lowercaseMapping.unicodeScalars)
            }
        }
        return String(scalars).precomposedStringWithCanonicalMapping
    }

    /// `text` in canonical composition (NFC), the form index keys and name orders hold strings in. Text that
    /// ``isOwnComposition(_:)`` is returned as it is, without Foundation's normalizer and the two string conversions
    /// around it.
    package static func composed(_ text: String) -> String {
        var text = text
        let isOwn = text.withUTF8 { isOwnComposition(UnsafeRawBufferPointer($0)) }
        return isOwn ? text : text.precomposedStringWithCanonicalMapping
    }

    /// Whether the UTF-8 text `bytes` is certainly its own canonical composition (NFC), so that its byte order is
    /// its order: every scalar is below U+0300 (no byte at or above 0xCC — ASCII, Latin-1 and the Latin Extended
    /// blocks), where no character decomposes differently, composes with a neighbour or reorders. `false` says only
    /// that the text has to be normalized to know.
    @inlinable
    package static func isOwnComposition(_ bytes: UnsafeRawBufferPointer) -> Bool {
        if UTF8Text.isASCII(bytes) { return true }
        for byte in bytes where byte >= 0xCC { return false }
        return true
    }

    /// ASCII text folds without Unicode tables: diacritic folding changes nothing, case folding lowers A–Z.
    private static func foldASCII(_ text: String, caseInsensitive: Bool) -> String? {
        var needsLowering = false
        for byte in text.utf8 {
            if byte >= 0x80 { return nil }
            if byte >= 0x41 && byte <= 0x5A { needsLowering = true }
        }
        guard caseInsensitive && needsLowering else { return text }
        return String(decoding: text.utf8.map { $0 >= 0x41 && $0 <= 0x5A ? $0 | 0x20 : $0 }, as: UTF8.self)
    }
}
