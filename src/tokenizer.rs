//! Finding a tokenizer: a `tokenizer.json` file, a folder holding one, or a
//! HuggingFace model id looked up in the local HuggingFace cache (and
//! fetched from the hub only when it is not cached).

use std::path::{Path, PathBuf};

use tokenizers::Tokenizer;

/// A loaded tokenizer and where it came from (for the summary line).
pub struct Resolved {
    pub tokenizer: Tokenizer,
    pub source: String,
}

/// The model id to use for a model name seen in a trace: the substring rules
/// of the upstream converter, with DeepSeek-R1-Distill-Llama-8B as the default.
pub fn infer_model_id(model_name: &str) -> &'static str {
    const KNOWN: [(&str, &str); 5] = [
        ("llama-3.3-70b", "meta-llama/Llama-3.3-70B-Instruct"),
        ("llama-3.1-70b", "meta-llama/Llama-3.1-70B-Instruct"),
        ("llama-3.1-8b", "meta-llama/Llama-3.1-8B-Instruct"),
        ("llama-3-70b", "meta-llama/Meta-Llama-3-70B-Instruct"),
        ("llama-3-8b", "meta-llama/Meta-Llama-3-8B-Instruct"),
    ];
    let name = model_name.to_lowercase();
    KNOWN
        .iter()
        .find(|(pattern, _)| name.contains(pattern))
        .map_or("deepseek-ai/DeepSeek-R1-Distill-Llama-8B", |(_, id)| id)
}

/// The HuggingFace hub cache folder: `$HF_HUB_CACHE`, else `$HF_HOME/hub`,
/// else `~/.cache/huggingface/hub`.
pub fn hub_cache_dir() -> Option<PathBuf> {
    let var = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    var("HF_HUB_CACHE")
        .or_else(|| var("HF_HOME").map(|h| h.join("hub")))
        .or_else(|| var("HOME").map(|h| h.join(".cache/huggingface/hub")))
}

/// `tokenizer.json` of `model_id` in the cache at `cache`: the snapshot named
/// by `refs/main` first, else any snapshot that has one.
pub fn find_in_cache(cache: &Path, model_id: &str) -> Option<PathBuf> {
    let repo = cache.join(format!("models--{}", model_id.replace('/', "--")));
    if let Ok(rev) = std::fs::read_to_string(repo.join("refs/main")) {
        let file = repo
            .join("snapshots")
            .join(rev.trim())
            .join("tokenizer.json");
        if file.is_file() {
            return Some(file);
        }
    }
    let mut snapshots: Vec<PathBuf> = std::fs::read_dir(repo.join("snapshots"))
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path().join("tokenizer.json")))
        .filter(|p| p.is_file())
        .collect();
    snapshots.sort();
    snapshots.into_iter().next()
}

/// Why no tokenizer could be had.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    #[error("{}: not a usable tokenizer.json: {reason}", path.display())]
    Unusable { path: PathBuf, reason: String },
    #[error("{}: the folder has no tokenizer.json", .0.display())]
    FolderWithoutFile(PathBuf),
    #[error(
        "no tokenizer for `{spec}`: it is not a file or folder here, and searched {searched}. \
         Pass --tokenizer path/to/tokenizer.json (or a folder holding one)."
    )]
    NotFound { spec: String, searched: String },
}

/// Why a download from the hub did not give a file (reported as one of
/// the places searched).
#[derive(Debug, thiserror::Error)]
enum DownloadError {
    #[error("HF_HUB_OFFLINE=1")]
    Offline,
    #[error("`{0}` is not a model id (ORG/NAME)")]
    NotAModelId(String),
    #[error("GET {url}: {source}")]
    Http { url: String, source: ureq::Error },
    #[error("nowhere to store it: no cache folder")]
    NoCache,
    #[error("writing {}: {source}", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

fn load(path: &Path) -> Result<Tokenizer, TokenizerError> {
    Tokenizer::from_file(path).map_err(|e| TokenizerError::Unusable {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })
}

/// Resolves `spec` (a file, a folder, or a model id) to a tokenizer.
pub fn resolve(spec: &str) -> Result<Resolved, TokenizerError> {
    let path = Path::new(spec);
    if path.is_file() {
        return Ok(Resolved {
            tokenizer: load(path)?,
            source: path.display().to_string(),
        });
    }
    if path.is_dir() {
        let file = path.join("tokenizer.json");
        if file.is_file() {
            return Ok(Resolved {
                tokenizer: load(&file)?,
                source: file.display().to_string(),
            });
        }
        return Err(TokenizerError::FolderWithoutFile(path.to_path_buf()));
    }
    let mut searched = Vec::new();
    if let Some(cache) = hub_cache_dir() {
        if let Some(file) = find_in_cache(&cache, spec) {
            return Ok(Resolved {
                tokenizer: load(&file)?,
                source: format!("{spec} ({})", file.display()),
            });
        }
        searched.push(format!(
            "the HuggingFace cache {}",
            cache
                .join(format!("models--{}", spec.replace('/', "--")))
                .display()
        ));
    } else {
        searched.push(
            "no HuggingFace cache folder (HF_HUB_CACHE, HF_HOME and HOME are unset)".to_string(),
        );
    }
    match download(spec) {
        Ok(file) => Ok(Resolved {
            tokenizer: load(&file)?,
            source: format!("{spec} (downloaded to {})", file.display()),
        }),
        Err(e) => {
            searched.push(format!("the hub: {e}"));
            Err(TokenizerError::NotFound {
                spec: spec.to_string(),
                searched: searched.join("; "),
            })
        }
    }
}

/// Fetches `tokenizer.json` of `model_id` from `$HF_ENDPOINT` (default
/// huggingface.co, with `$HF_TOKEN` for gated models) into the cache layout.
fn download(model_id: &str) -> Result<PathBuf, DownloadError> {
    if std::env::var_os("HF_HUB_OFFLINE").is_some_and(|v| v == "1") {
        return Err(DownloadError::Offline);
    }
    if !model_id.contains('/') || model_id.starts_with('/') || model_id.contains("..") {
        return Err(DownloadError::NotAModelId(model_id.to_string()));
    }
    let endpoint =
        std::env::var("HF_ENDPOINT").unwrap_or_else(|_| "https://huggingface.co".to_string());
    let url = format!(
        "{}/{model_id}/resolve/main/tokenizer.json",
        endpoint.trim_end_matches('/')
    );
    // A hub that does not answer must not hang the conversion.
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_connect(Some(std::time::Duration::from_secs(10)))
        .timeout_global(Some(std::time::Duration::from_secs(300)))
        .build()
        .into();
    let mut req = agent.get(&url);
    if let Ok(token) = std::env::var("HF_TOKEN") {
        req = req.header("Authorization", &format!("Bearer {token}"));
    }
    let http = |source| DownloadError::Http {
        url: url.clone(),
        source,
    };
    let body = req
        .call()
        .map_err(http)?
        .body_mut()
        .with_config()
        .limit(1 << 30)
        .read_to_vec()
        .map_err(http)?;
    let cache = hub_cache_dir().ok_or(DownloadError::NoCache)?;
    let repo = cache.join(format!("models--{}", model_id.replace('/', "--")));
    let snapshot = repo.join("snapshots/main");
    let write = |path: &Path, bytes: &[u8]| {
        path.parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| std::fs::write(path, bytes))
            .map_err(|source| DownloadError::Write {
                path: path.to_path_buf(),
                source,
            })
    };
    let file = snapshot.join("tokenizer.json");
    write(&file, &body)?;
    write(&repo.join("refs/main"), b"main")?;
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_names_map_to_tokenizers() {
        assert_eq!(
            infer_model_id("meta/llama-3.3-70b-instruct"),
            "meta-llama/Llama-3.3-70B-Instruct"
        );
        assert_eq!(
            infer_model_id("Meta-Llama-3-8B"),
            "meta-llama/Meta-Llama-3-8B-Instruct"
        );
        assert_eq!(
            infer_model_id("nvidia/llama-3.1-8b-instruct"),
            "meta-llama/Llama-3.1-8B-Instruct"
        );
        assert_eq!(
            infer_model_id("gpt-4o"),
            "deepseek-ai/DeepSeek-R1-Distill-Llama-8B"
        );
    }
}
