//! Unit tests of `token`, beside it so the module stays short. They never
//! set [`TOKEN_ENV`]: the process environment is shared by parallel tests.

use super::*;

#[test]
fn a_created_token_file_has_mode_0600_and_is_read_back_on_the_next_load() {
    let dir = tempfile::tempdir().unwrap();
    let (token, created) = Token::load_or_create(dir.path()).unwrap();
    let secret = created.expect("the first load creates the file");
    assert_eq!(secret.len(), 64);
    assert!(secret.bytes().all(|b| b.is_ascii_hexdigit()));
    let path = dir.path().join(TOKEN_FILE);
    let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    assert!(token.matches(secret.as_bytes()));
    assert_eq!(
        token.source(),
        &TokenSource::File {
            path: path.clone(),
            created: true
        }
    );

    let (again, created) = Token::load_or_create(dir.path()).unwrap();
    assert_eq!(created, None, "the second load creates nothing");
    assert!(again.matches(secret.as_bytes()));
    assert_eq!(
        again.source(),
        &TokenSource::File {
            path,
            created: false
        }
    );
}

#[test]
fn two_created_tokens_differ() {
    let (one, two) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let first = Token::load_or_create(one.path()).unwrap().1.unwrap();
    let second = Token::load_or_create(two.path()).unwrap().1.unwrap();
    assert_ne!(first, second);
}

#[test]
fn a_token_file_readable_by_others_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    Token::load_or_create(dir.path()).unwrap();
    let path = dir.path().join(TOKEN_FILE);
    fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
    let refused = Token::load_or_create(dir.path()).unwrap_err();
    assert!(
        matches!(refused, TokenError::Exposed { mode: 0o644, .. }),
        "{refused}"
    );
}

#[test]
fn a_wrong_empty_prefix_or_longer_token_does_not_match() {
    let secret = "s".repeat(40);
    let token = Token::new(&secret, TokenSource::Given).unwrap();
    assert!(token.matches(secret.as_bytes()));
    for wrong in [
        String::new(),
        "s".repeat(39),
        "s".repeat(41),
        format!("{}t", "s".repeat(39)),
    ] {
        assert!(!token.matches(wrong.as_bytes()), "{wrong:?}");
    }
}

#[test]
fn a_short_long_or_non_ascii_token_is_malformed_and_debug_hides_the_secret() {
    for bad in [
        "short".to_owned(),
        "x".repeat(MAX_TOKEN_BYTES + 1),
        format!("{} ", "x".repeat(40)),
        format!("{}é", "x".repeat(40)),
    ] {
        assert!(matches!(
            Token::new(&bad, TokenSource::Given),
            Err(TokenError::Malformed(_))
        ));
    }
    let secret = "q".repeat(48);
    let token = Token::new(&secret, TokenSource::Given).unwrap();
    assert!(!format!("{token:?}").contains(&secret));
}
