//! The migration files this repository has shipped never change: sqlx records the checksum of
//! every applied migration and refuses to run against a database whose applied files differ, so
//! a changed byte in one (a reworded header included) breaks every deployment that applied it.
//! A new step, registry or settings file is added here with its digest when it is first written.

use std::collections::BTreeMap;
use std::path::Path;

/// SHA-256 of each shipped file under `generated/migrations`.
const SHIPPED: [(&str, &str); 44] = [
    (
        "0001_evc_runtime.sql",
        "4658ac6aa7993a9d0e3e80c237bb3b71a495f293072a05d3719553112fa3cfab",
    ),
    (
        "0002_evc_registry_0a315175f5d1.sql",
        "616df3d509c72960e8fee3387782d461358547da78c828fb4e76565e85a1234b",
    ),
    (
        "0003_evc_runtime_v2.sql",
        "caf225810fdb2ca4d34275148f95b01d832c49e468c45c0819d2985245793785",
    ),
    (
        "0004_evc_runtime_v3.sql",
        "2e9700f132c220e1847f62151bb36f86e1ebb127df51fbfbe7561736edcc3eda",
    ),
    (
        "0005_evc_runtime_v4.sql",
        "76e6695be97fb7d1f4fc10d0353bea661bdf1860a494034786e1677e5575fb3f",
    ),
    (
        "0006_evc_runtime_v5.sql",
        "298b7b963d3cc23618528efb3b2cbcc3c15d21a867a5029108dee8a0467e6b1d",
    ),
    (
        "0007_evc_runtime_v6.sql",
        "8b0b05235ffaa5d5764bd2f9a7c134b252d2c6dc82b6ad6031e3626774cfdcaa",
    ),
    (
        "0008_evc_runtime_v7.sql",
        "24d21efe7841a418c2e5344fdb903a1b7437d10302650cb1da8b2cde6767bb85",
    ),
    (
        "0009_evc_settings_65cbc5d12fa6.sql",
        "0bb7b33f9dde89437ff1c121c1c4a4540d86a10d3fd1e3120b1509d9ac48f93f",
    ),
    (
        "0010_evc_registry_cf189f13e159.sql",
        "31d5b1a6ace5ae23f9c9e273be34a1a9c8ddd9e8bbe0ea48d5a48d9ac4376cac",
    ),
    (
        "0011_evc_runtime_v8.sql",
        "4fad35f02ca9dd14140f8cffb45a4e414ffb02d39b4656f76443dad8d2087129",
    ),
    (
        "0012_evc_runtime_v9.sql",
        "ba9fe6bc24a1f60134b764a986dd305d0d477278f13efde28894784033f16d16",
    ),
    (
        "0013_evc_runtime_v10.sql",
        "c38deb6f0733bb8e6b56891b764574f1f06b234577080765691bd5916c0efe18",
    ),
    (
        "0014_evc_runtime_v11.sql",
        "5d997e78d42602861d0ce592095e33f4b2fcbce7f48aed514168925822c07cc5",
    ),
    (
        "0015_evc_runtime_v12.sql",
        "61a398415921c1b0172d0fe380d01094b5c53ea61da1013a9e3c3323a7d9a269",
    ),
    (
        "0016_evc_runtime_v13.sql",
        "b116d973bfc0131e1cd5e864c6a46c2cd131bde4e9acc48027c99b0c4b2fccc7",
    ),
    (
        "0017_evc_runtime_v14.sql",
        "11b2cd3d20c3805ea3aa5c9b80edf75ac73e69c9f327c95f1efc3e08227bd22a",
    ),
    (
        "0018_evc_runtime_v15.sql",
        "b1333d990a8a2e815d25d106eae6a65468441e18561ed67af87f9bd88ac9daa1",
    ),
    (
        "0019_evc_runtime_v16.sql",
        "922b598d0831fad7f0300ac6f022fc4cf68f31302df3398939c42d71aa72f56e",
    ),
    (
        "0020_evc_runtime_v17.sql",
        "6979c1b8bdfc3529b167b0edd66c60286d226c856463a43d474258333c1db985",
    ),
    (
        "0021_evc_runtime_v18.sql",
        "efe14185de8cb33dc86b2e0724189477d90e87c663db1e10c5564a67c50ee4e1",
    ),
    (
        "0022_evc_runtime_v19.sql",
        "cf3bd661ec884c8ef2ac277713ee963ffcf63f1106ac60c19f14fdc1427cbaa0",
    ),
    (
        "0023_evc_runtime_v20.sql",
        "8023b34bb9a6ca4058e739789e9778241ac9724e83c718680870d57bc9312730",
    ),
    (
        "0024_evc_runtime_v21.sql",
        "7680bed90013c35842e545e10f28f22ff3a093564ce1164b9e25232bafd7a1fc",
    ),
    (
        "0025_evc_registry_8863cc6dcbb7.sql",
        "4ced74c6411ba5b55159b85178f3eb3080f0ea8046e898004f1d30b188320f62",
    ),
    (
        "0026_evc_runtime_v22.sql",
        "cd19f6ea0cd31cfb382449b75cac082e2f334660f5af7cd5b6f405b960406774",
    ),
    (
        "0027_evc_registry_85ce05edc4fd.sql",
        "1b2f979347f3df9fbce475f4dce4cd0046f2c17ee7bafa561e9575341d75680d",
    ),
    (
        "0028_evc_runtime_v23.sql",
        "985b55004f475392866f0294bade18f612b4dca9c3c1a123ff39cfe7c8d18819",
    ),
    (
        "0029_evc_registry_97e3053e0c81.sql",
        "40354aa587e97020c7b0f21771bbeb97762008d802924eff5184a438df8f0a7c",
    ),
    (
        "0030_evc_runtime_v24.sql",
        "e3e2b0689ad63983944309287cd8988d64f15dbdc347c10426fe6155eb572e9d",
    ),
    (
        "0031_evc_registry_74831fa7a413.sql",
        "63da99609c6c781bc38c0f77697e8b19fef059a5ff271fa1c96777dcb2844434",
    ),
    (
        "0032_evc_settings_40cdb98978f0.sql",
        "7c6a2e980407f05177e21f061ce912759d32cde5a58c487a41037be1c73f1508",
    ),
    (
        "0033_evc_runtime_v25.sql",
        "91cc57343e62922770dc8740e405ba463d0c182ef0ceec6c6cb97426b52413a2",
    ),
    (
        "0034_evc_settings_fac918d0bc97.sql",
        "214cc9499a2428b24bf0cd0cc752722be3961e1c00d77bd3974f318d6941cc3d",
    ),
    (
        "0035_evc_runtime_v26.sql",
        "f711bf8d4d9e28b1b28023da8a329b0bc86606cdab9bb7eee2bf9eace65bc8a2",
    ),
    (
        "0036_evc_settings_688e0155f98c.sql",
        "965219351806850e9a36003ae0ad86b6831911da447e4704ae23e7fc6adf0965",
    ),
    (
        "0037_evc_runtime_v27.sql",
        "81fb87fd7238a422cda95958b2704993164299a3208cc4f3468ddcc90d6ba5e3",
    ),
    (
        "0038_evc_settings_755cc90ab278.sql",
        "7f60f9e18773c4b90a559a017c19b27a8c4e12a1b1cffcaaed1ebe1a2d271f57",
    ),
    (
        "0039_evc_runtime_v28.sql",
        "d49b13f2c9869907e2a250075b399769c126a2f8de7723c57db036bc795ebf09",
    ),
    (
        "0040_evc_runtime_v29.sql",
        "919f51608c02fbacdc80778d32701ebe9e70b051dc46ca4866f412a79c9b883f",
    ),
    (
        "0041_evc_settings_f8a9b9f8364a.sql",
        "a484e49147158b86780640cfaee325c24cd9003bb1c0b6138bfbd25f42538531",
    ),
    (
        "0042_evc_runtime_v30.sql",
        "a43677b5e815679db19fc6cb55626b9d0d275ddceda62e98c26a026ba7c9ffe1",
    ),
    (
        "0043_evc_runtime_v31.sql",
        "3da3b9fa7f739758bf7500d7a3249cad38b8498836c3b4698de9b010c69f37a6",
    ),
    (
        "0044_evc_runtime_v32.sql",
        "c79638b00f7143b2dd6d916ec844a1ce57291077902b9ad64e0264d333cadb32",
    ),
];

#[test]
fn shipped_migration_files_keep_their_bytes() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("generated/migrations");
    let mut present = BTreeMap::new();
    for entry in std::fs::read_dir(&dir).expect("generated/migrations") {
        let path = entry.expect("entry").path();
        let name = path
            .file_name()
            .expect("name")
            .to_string_lossy()
            .into_owned();
        let text = std::fs::read_to_string(&path).expect("UTF-8 migration");
        present.insert(name, evc_codegen::digest::sha256_hex(&text));
    }
    for (name, digest) in SHIPPED {
        assert_eq!(
            present.get(name).map(String::as_str),
            Some(digest),
            "{name} changed or went missing: an applied migration must keep its bytes; \
             put the change in a new step"
        );
    }
    let unpinned: Vec<&String> = present
        .keys()
        .filter(|name| !SHIPPED.iter().any(|(shipped, _)| shipped == *name))
        .collect();
    assert!(
        unpinned.is_empty(),
        "pin the digest of each new migration file here: {unpinned:?}"
    );
}
