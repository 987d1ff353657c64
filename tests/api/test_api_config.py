"""`[channels.http]` is the API's table: `locale` is read, any other key stops start-up naming it."""

from __future__ import annotations

import pytest

from agenthub.config import Settings
from agenthub.errors import ConfigError
from agenthub.hosting.app import assemble, build_services


@pytest.mark.parametrize("key", ["port", "enabled", "tokens"])
async def test_a_key_the_api_table_does_not_have_stops_start_up_naming_it(settings: Settings, key: str) -> None:
    settings = settings.model_copy(update={"channels": {"http": {key: 9000}}})
    async with build_services(settings) as services:
        with pytest.raises(ConfigError, match=rf"channels\.http\.{key}: .*\[http\]"):
            assemble(settings, services)


async def test_the_locale_key_is_accepted_and_the_api_is_built(settings: Settings) -> None:
    settings = settings.model_copy(update={"channels": {"http": {"locale": "en"}}})
    async with build_services(settings) as services:
        server, channels = assemble(settings, services)
        assert [c.name for c in channels] == ["http"]
        await server.close()


async def test_with_the_server_off_a_stray_key_still_stops_start_up(settings: Settings) -> None:
    http = settings.http.model_copy(update={"enabled": False})
    settings = settings.model_copy(update={"http": http, "channels": {"http": {"port": 9000}}})
    async with build_services(settings) as services:
        with pytest.raises(ConfigError, match=r"channels\.http\.port"):
            assemble(settings, services)


async def test_with_the_server_off_there_is_no_api(settings: Settings) -> None:
    settings = settings.model_copy(update={"http": settings.http.model_copy(update={"enabled": False})})
    async with build_services(settings) as services:
        server, channels = assemble(settings, services)
        assert channels == []
        await server.close()


async def test_a_locale_the_product_has_no_texts_in_stops_start_up_naming_it(settings: Settings) -> None:
    settings = settings.model_copy(update={"channels": {"http": {"locale": "fr"}}})
    async with build_services(settings) as services:
        with pytest.raises(ConfigError, match=r'channels\.http\.locale: must be "zh-CN" or "en"$'):
            assemble(settings, services)
