import pytest

from kafkalake.config.tables import Table
from kafkalake.spark.registration import _normalise, register_table


@pytest.mark.parametrize(
    "catalog",
    ["/data/t", "/data/t/", "file:/data/t", "file:///data/t", "file:///data/t/", "file://localhost/data/t"],
)
def test_a_local_location_matches_the_metastore_spelling(catalog):
    # DESCRIBE DETAIL gives file:/data/t for a table created at file:///data/t: a second registration
    # (a cleared task, a dead-letter table appearing later) must not read that as another location.
    assert _normalise(catalog) == _normalise("file:/data/t") == "/data/t"


def test_other_locations_stay_apart():
    assert _normalise("s3a://bucket/data/t/") == "s3a://bucket/data/t"
    assert _normalise("/data/t") != _normalise("/data/u")
    assert _normalise("file://otherhost/data/t") != "/data/t"


class _Session:
    """Just what register_table asks of a SparkSession, for a name not registered yet."""

    def __init__(self) -> None:
        self.statements: list[str] = []
        self.catalog = self

    def tableExists(self, name: str) -> bool:
        return False

    def sql(self, statement: str) -> None:
        self.statements.append(statement)


#: Spark SQL's escapes in a string literal (SparkParserUtils.unescapeSQLString); any other
#: character after a backslash stands for itself.
_ESCAPES = {"0": "\0", "b": "\b", "n": "\n", "r": "\r", "t": "\t", "Z": "\x1a"}


def _spark_string(literal: str) -> str:
    assert literal[0] == literal[-1] == "'"
    out, chars = [], iter(literal[1:-1])
    for char in chars:
        if char == "\\":
            char = next(chars)
            out.append(_ESCAPES.get(char, char))
        else:
            assert char != "'", f"unescaped quote in {literal}"
            out.append(char)
    return "".join(out)


ODD_LOCATIONS = ["/data/a\\tb/t", "/data/it's/t", "/data/back\\'quote/t", "/data/end\\"]


@pytest.mark.parametrize("location", ODD_LOCATIONS)
def test_the_location_reaches_spark_as_written(location):
    session = _Session()
    register_table(session, Table("db.t", location))  # type: ignore[arg-type]
    create = session.statements[-1]
    prefix = "CREATE TABLE IF NOT EXISTS db.t USING DELTA LOCATION "
    assert create.startswith(prefix)
    assert _spark_string(create.removeprefix(prefix)) == location
