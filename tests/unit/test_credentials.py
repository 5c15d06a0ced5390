"""credentials: user:password@ in -H is split from the URL every output shows."""

import base64

import pytest

from llmload.settings.credentials import TargetURL, public_url, split_credentials


def _basic(pair: str) -> str:
    return "Basic " + base64.b64encode(pair.encode()).decode()


def test_p2_credentials_leave_the_url_and_become_a_basic_authorization():
    assert split_credentials("http://alice:s3cret@10.0.0.5:8000/prefix") == TargetURL(
        "http://10.0.0.5:8000/prefix", _basic("alice:s3cret")
    )


@pytest.mark.parametrize(
    ("url", "public", "pair"),
    [
        ("https://bob:p%40ss@vllm.example", "https://vllm.example", "bob:p@ss"),  # escapes decoded
        ("http://tok@127.0.0.1:8000", "http://127.0.0.1:8000", "tok:"),  # user only
        ("http://u:p@[::1]:8000/v", "http://[::1]:8000/v", "u:p"),  # IPv6 keeps its brackets
    ],
)
def test_p2_credentials_split_from_every_url_form(url, public, pair):
    assert split_credentials(url) == TargetURL(public, _basic(pair))


def test_p2_url_without_credentials_is_unchanged():
    assert split_credentials("http://127.0.0.1:8000") == TargetURL("http://127.0.0.1:8000", None)


def test_p2_unparsable_url_still_loses_its_credentials():
    assert public_url("http://u:secret@host:notaport/x") == "http://host:notaport/x"


def test_nc08_credential_query_values_are_shown_as_stars_other_parameters_as_given():
    from llmload.settings.credentials import public_query, public_url, secret_query_names

    url = "https://u:p@gw.example/openai?api-version=2024-06-01&api_key=s1&sig=s2&token=s3"
    assert public_url(url) == "https://gw.example/openai?api-version=2024-06-01&api_key=***&sig=***&token=***"
    assert secret_query_names("api-version=1&key=k&x=y") == ("key",)
    assert public_query("api-version=2024-06-01") == "api-version=2024-06-01"
    assert public_url("http://h:8000/v1?code=abc") == "http://h:8000/v1?code=***"
