import Foundation
import FuzzSupport
import ObjectGraph

// The model loaders: any bytes given as a Core Data `contents` file or as the JSON form either load or fail with a
// `ModelError` — no trap. What loads is checked as a loaded model is relied on: its version hash is computed, and the
// JSON form of it loads back to a model with the same hash that writes the same JSON.

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzModel(_ start: UnsafeRawPointer, _ count: Int) -> CInt {
    guard count > 0 else { return 0 }
    let bytes = UnsafeRawBufferPointer(start: start, count: count)
    let data = Data(bytes.dropFirst())
    let model: ManagedObjectModel
    do {
        model = try bytes[0] & 1 == 0 ? ManagedObjectModel(coreDataModelXML: data) : ManagedObjectModel(json: data)
    } catch {
        _ = error.description
        return 0
    }
    let hash = model.versionHash
    let json = model.jsonData()
    let reloaded: ManagedObjectModel
    do {
        reloaded = try ManagedObjectModel(json: json)
    } catch {
        finding("a loaded model's JSON form does not load back: \(error)\n\(String(decoding: json, as: UTF8.self))")
    }
    guard reloaded.versionHash == hash else {
        finding("a loaded model's JSON form loads back with another version hash\n\(String(decoding: json, as: UTF8.self))")
    }
    guard reloaded.jsonData() == json else {
        finding("a loaded model's JSON form loads back and writes other JSON\n\(String(decoding: json, as: UTF8.self))")
    }
    return 0
}
