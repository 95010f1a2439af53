//! The built-in SYSTEM profiles and templates: the files in `profiles/*.json` and
//! `profiles/templates/*.json`, compiled into the binary, parsed and validated here. The
//! services write them to the store at every start-up.

use crate::model::invalid::Invalid;
use crate::model::names;
use crate::model::profile::{ProfileId, ProfileSpec, Provisioners, ValidSpec};
use crate::model::template::{Template, TemplateId};

/// The built-in profiles: file name and content.
pub const PROFILE_FILES: &[(&str, &str)] = &[
    ("native.json", include_str!("../../profiles/native.json")),
    ("local.json", include_str!("../../profiles/local.json")),
];

/// The built-in templates: file name and content.
pub const TEMPLATE_FILES: &[(&str, &str)] = &[
    (
        "dask.json",
        include_str!("../../profiles/templates/dask.json"),
    ),
    (
        "spark.json",
        include_str!("../../profiles/templates/spark.json"),
    ),
    (
        "zookeeper.json",
        include_str!("../../profiles/templates/zookeeper.json"),
    ),
];

/// Parses built-in file `dir/file` as a `T`; an error names the file and the JSON path.
pub fn parse_file<T: serde::de::DeserializeOwned>(
    dir: &str,
    file: &str,
    json: &str,
) -> Result<T, Invalid> {
    let de = &mut serde_json::Deserializer::from_str(json);
    serde_path_to_error::deserialize(de).map_err(|e| {
        Invalid::new(
            format!("{dir}/{file}"),
            format!("{}: {}", e.path(), e.inner()),
        )
    })
}

#[cfg(test)]
/// Asserts that the `*.json` files in `dir` (relative to the crate) are exactly `files`.
#[cfg(test)]
pub fn assert_all_built_in(dir: &str, files: &[(&str, &str)]) {
    let path = format!("{}/{dir}", env!("CARGO_MANIFEST_DIR"));
    let mut on_disk: Vec<String> = std::fs::read_dir(&path)
        .unwrap_or_else(|e| panic!("{path}: {e}"))
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".json"))
        .collect();
    on_disk.sort();
    let mut built_in: Vec<String> = files.iter().map(|(f, _)| f.to_string()).collect();
    built_in.sort();
    assert_eq!(
        on_disk, built_in,
        "{dir}/*.json and the built-in list differ"
    );
}

/// Parses and validates every built-in profile file.
pub fn profiles(registry: &impl Provisioners) -> Result<Vec<(ProfileId, ValidSpec)>, Invalid> {
    PROFILE_FILES
        .iter()
        .map(|(file, json)| {
            let context = |e: String| Invalid::new(format!("profiles/{file}"), e);
            let spec: ProfileSpec = parse_file("profiles", file, json)?;
            let name = spec
                .name
                .clone()
                .ok_or_else(|| context("has no \"name\"".into()))?;
            names::check("name", &name).map_err(|e| context(e.to_string()))?;
            let valid = spec
                .validate(&name, registry)
                .map_err(|e| context(e.to_string()))?;
            Ok((ProfileId::system(&name), valid))
        })
        .collect()
}

/// Parses and validates every built-in template file.
pub fn templates() -> Result<Vec<(TemplateId, Template)>, Invalid> {
    TEMPLATE_FILES
        .iter()
        .map(|(file, json)| template_file("profiles/templates", file, json))
        .collect()
}

/// The tests' echo fixture (`tests/fixtures/templates/echo-services.json`), parsed: the shape
/// of a coordinated cluster whose actions only echo, for the unit tests that plan a template
/// without an engine. Not compiled into the server (the makespan benchmark reads the file
/// itself).
#[cfg(test)]
pub fn fixture_template() -> Result<(TemplateId, Template), Invalid> {
    template_file(
        "tests/fixtures/templates",
        "echo-services.json",
        include_str!("../../tests/fixtures/templates/echo-services.json"),
    )
}

/// Parses and validates template file `dir/file` (its content `json`), named by its `name`.
pub fn template_file(dir: &str, file: &str, json: &str) -> Result<(TemplateId, Template), Invalid> {
    let context = |e: String| Invalid::new(format!("{dir}/{file}"), e);
    let template: Template = parse_file(dir, file, json)?;
    let name = template
        .name
        .clone()
        .ok_or_else(|| context("has no \"name\"".into()))?;
    let id = TemplateId {
        namespace: None,
        name,
    };
    id.check().map_err(|e| context(e.to_string()))?;
    template.validate().map_err(|e| context(e.to_string()))?;
    Ok((id, template))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_file_in_profiles_templates_is_built_in_and_valid() {
        assert_all_built_in("profiles/templates", TEMPLATE_FILES);
        let parsed = templates().expect("built-in templates are valid");
        let names: Vec<&str> = parsed.iter().map(|(id, _)| id.name.as_str()).collect();
        assert_eq!(names, ["dask", "spark", "zookeeper"]);
        // The echo fixture is valid, and not shipped.
        let (fixture, _) = fixture_template().expect("the fixture is valid");
        assert!(!names.contains(&fixture.name.as_str()));
    }
}
