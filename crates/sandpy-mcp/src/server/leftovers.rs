//! What a run left, as items of its result: its `/output` files, and images of its rich
//! outputs too big to send inline, kept as resources of the caller's MCP session
//! ([`super::resources`]) and given as `resource_link` items; files up to the inline size
//! also inline, before the links (an image as `ImageContent`, any other file as an
//! embedded resource with the same URI). Where nothing can be kept (keeping off, a bound
//! reached), files come inline as before resources (`file:///output/...`), the result
//! saying why they were not kept. A client older than `resource_link` (protocol before
//! 2025-06-18) gets every file inline, with its `sandpy://` URI.

use super::resources::{Leftover, LeftoverKind, NotKept, Owner, Resource, ResourceStore};
use rmcp::model::ContentBlock;
use sandpy::files::OutputFile;
use sandpy::RichOutput;
use serde_json::{json, Value};
use std::sync::Arc;

/// A run's leftovers after the store took what it could.
pub(super) struct ResultFiles {
    /// The kept file of each `/output` file, in order; empty when none were kept.
    files: Vec<Resource>,
    /// The kept image of each big output, by output index.
    outputs: Vec<(usize, Resource)>,
    /// Why nothing was kept, when something could have been.
    not_kept: Option<NotKept>,
    /// Files and images up to this size come inline too.
    inline_bytes: u64,
    /// Whether the client reads `resource_link` items.
    links: bool,
}

/// Keep what `files` and `outputs` left (a file, an output's image over the inline size)
/// for `owner`; `links` when the client reads `resource_link` items.
pub(super) fn keep(
    store: &ResourceStore,
    owner: &Owner,
    files: &[OutputFile],
    outputs: &[RichOutput],
    links: bool,
) -> ResultFiles {
    let inline_bytes = store.limits().inline_bytes;
    let mut leftovers: Vec<Leftover> = files
        .iter()
        .map(|file| Leftover {
            kind: LeftoverKind::File(file.name.clone()),
            mime_type: file.mime_type.clone(),
            content: Arc::new(file.content.clone()),
        })
        .collect();
    let mut big = Vec::new();
    if links {
        for (i, output) in outputs.iter().enumerate() {
            if let Some((mime, bytes)) = big_image(output, inline_bytes) {
                big.push(i);
                leftovers.push(Leftover {
                    kind: LeftoverKind::Output(i + 1, extension(mime)),
                    mime_type: mime.to_string(),
                    content: Arc::new(bytes),
                });
            }
        }
    }
    let mut kept = ResultFiles {
        files: Vec::new(),
        outputs: Vec::new(),
        not_kept: None,
        inline_bytes,
        links,
    };
    if leftovers.is_empty() {
        return kept;
    }
    match store.keep(owner, leftovers) {
        Ok(mut resources) => {
            let outputs = resources.split_off(files.len());
            kept.outputs = big.into_iter().zip(outputs).collect();
            kept.files = resources;
        }
        Err(NotKept::Off) => {}
        Err(why) => kept.not_kept = Some(why),
    }
    kept
}

/// The image of `output` when it is bigger than `inline_bytes`: its mime type and bytes.
fn big_image(output: &RichOutput, inline_bytes: u64) -> Option<(&str, Vec<u8>)> {
    use base64::Engine;
    let (mime, data) = output.richest();
    // base64 is 4/3 of the bytes: the decoded size is known before decoding.
    let decoded = (data.len() as u64) / 4 * 3;
    if !RichOutput::is_binary(mime) || decoded <= inline_bytes {
        return None;
    }
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(data)
        .ok()?;
    (bytes.len() as u64 > inline_bytes).then_some((mime, bytes))
}

/// The file extension of an image type.
fn extension(mime: &str) -> &'static str {
    match mime {
        "image/png" => "png",
        "image/jpeg" => "jpg",
        "image/gif" => "gif",
        "image/webp" => "webp",
        _ => "bin",
    }
}

impl ResultFiles {
    /// The item of output `i` when its image was kept: a link to it.
    pub(super) fn output_item(&self, i: usize) -> Option<ContentBlock> {
        let (_, resource) = self.outputs.iter().find(|(index, _)| *index == i)?;
        Some(ContentBlock::resource_link(resource.listed()))
    }

    /// The items of the run's files: those inline first (each kept one when small, or
    /// every one when the client reads no links), then a link to each kept one; files not
    /// kept inline as before, after why.
    pub(super) fn file_items(&self, files: &[OutputFile]) -> Vec<ContentBlock> {
        let mut items = Vec::new();
        if let Some(why) = &self.not_kept {
            items.push(ContentBlock::text(format!(
                "--- files not kept as resources: {why} ---"
            )));
        }
        if self.files.is_empty() {
            items.extend(files.iter().map(file_block));
            return items;
        }
        let kept = files.iter().zip(&self.files);
        let inline = kept
            .clone()
            .filter(|(file, _)| !self.links || file.size <= self.inline_bytes);
        items.extend(inline.map(|(file, resource)| inline_block(file, resource)));
        if self.links {
            items.extend(kept.map(|(_, resource)| ContentBlock::resource_link(resource.listed())));
        }
        items
    }

    /// `structuredContent`'s `resources` (what was kept: uri, name, mime type, size) or
    /// `resources_not_kept` (why not), added to `structured`.
    pub(super) fn describe(&self, structured: &mut Value) {
        let Value::Object(fields) = structured else {
            return;
        };
        let kept = self.files.iter().chain(self.outputs.iter().map(|(_, r)| r));
        let listed: Vec<Value> = kept
            .map(|r| json!({"uri": r.uri, "name": r.name, "mime_type": r.mime_type, "size": r.size()}))
            .collect();
        if !listed.is_empty() {
            fields.insert("resources".into(), Value::Array(listed));
        }
        if let Some(why) = &self.not_kept {
            fields.insert("resources_not_kept".into(), Value::from(why.to_string()));
        }
    }
}

/// A kept file inline: an image as an image, any other file as an embedded resource with
/// its `sandpy://` URI (text when UTF-8).
fn inline_block(file: &OutputFile, resource: &Resource) -> ContentBlock {
    use base64::Engine;
    if file.mime_type.starts_with("image/") {
        let encoded = base64::engine::general_purpose::STANDARD.encode(&file.content);
        return ContentBlock::image(encoded, file.mime_type.clone());
    }
    ContentBlock::resource(resource.contents())
}

/// An output file not kept, inline as before resources: images as images, other files as
/// embedded resources named `file:///output/<path>` (text when UTF-8).
fn file_block(file: &OutputFile) -> ContentBlock {
    use base64::Engine;
    let encoded = || base64::engine::general_purpose::STANDARD.encode(&file.content);
    let uri = format!("file://{}/{}", sandpy::files::OUTPUT_DIR, file.name);
    if file.mime_type.starts_with("image/") {
        ContentBlock::image(encoded(), file.mime_type.clone())
    } else if let Some(text) = file.text() {
        ContentBlock::resource(
            rmcp::model::ResourceContents::text(text, uri).with_mime_type(file.mime_type.clone()),
        )
    } else {
        ContentBlock::resource(
            rmcp::model::ResourceContents::blob(encoded(), uri)
                .with_mime_type(file.mime_type.clone()),
        )
    }
}
