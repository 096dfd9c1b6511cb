"""Specification of the ``${...}`` template language."""

from __future__ import annotations

from typing import Any

import pytest

from tickwork.shared.domain.expressions import check_template, render
from tickwork.shared.errors import InvalidExpression

CONTEXT: dict[str, Any] = {
    "n": 7,
    "f": 2.5,
    "s": "hi",
    "t": True,
    "nothing": None,
    "mysql": {"user": "root", "ports": [3306, 3307], "empty": {}},
    "items": ["a", "b", "c"],
}


def ev(expression: str, **extra: Any) -> Any:
    """Render one whole-string expression and return its native value."""
    return render("${" + expression + "}", {**CONTEXT, **extra})


class TestTemplates:
    def test_a_string_without_dollar_is_returned_unchanged(self) -> None:
        text = "plain text"
        assert render(text, {}) is text

    def test_a_whole_string_expression_keeps_its_native_value(self) -> None:
        assert render("${n}", CONTEXT) == 7
        assert render("${mysql}", CONTEXT) == CONTEXT["mysql"]
        assert render("${t}", CONTEXT) is True
        assert render("${nothing}", CONTEXT) is None

    def test_embedded_expressions_are_replaced_by_their_string_form(self) -> None:
        assert render("n=${n} f=${f} s=${s}", CONTEXT) == "n=7 f=2.5 s=hi"

    def test_null_renders_as_empty_and_booleans_as_javascript_words(self) -> None:
        assert render("[${nothing}] ${t} ${!t}", CONTEXT) == "[] true false"

    def test_mappings_and_lists_render_as_compact_json(self) -> None:
        rendered = render("m=${mysql} i=${items}", CONTEXT)
        assert rendered == 'm={"user":"root","ports":[3306,3307],"empty":{}} i=["a","b","c"]'

    def test_double_dollar_is_a_literal_dollar(self) -> None:
        assert render("cost $$5 and $${n}", CONTEXT) == "cost $5 and ${n}"

    def test_an_unclosed_expression_is_left_as_written(self) -> None:
        assert render("echo ${n and more", CONTEXT) == "echo ${n and more"

    def test_a_lone_dollar_is_kept(self) -> None:
        assert render("a $ b $n", CONTEXT) == "a $ b $n"

    def test_a_closing_brace_inside_a_string_literal_does_not_end_the_expression(self) -> None:
        assert render("${'}' + s}!", CONTEXT) == "}hi!"

    def test_dicts_and_lists_are_rendered_deeply_without_touching_keys(self) -> None:
        value = {"${n}": ["${n}", {"x": "v${s}"}], "k": 3}
        assert render(value, CONTEXT) == {"${n}": [7, {"x": "vhi"}], "k": 3}

    def test_non_string_scalars_pass_through(self) -> None:
        assert render(5, CONTEXT) == 5
        assert render(None, CONTEXT) is None


class TestLookup:
    def test_dotted_and_bracket_access_reach_nested_values(self) -> None:
        assert ev("mysql.user") == "root"
        assert ev("mysql['user']") == "root"
        assert ev('mysql["ports"][1]') == 3307
        assert ev("items[0]") == "a"

    def test_length_of_lists_and_strings(self) -> None:
        assert ev("items.length") == 3
        assert ev("s.length") == 2

    def test_an_undefined_variable_is_an_error(self) -> None:
        with pytest.raises(InvalidExpression, match="undefined variable 'missing'"):
            render("x ${missing}", CONTEXT)

    def test_a_missing_key_is_an_error_naming_the_path(self) -> None:
        with pytest.raises(InvalidExpression, match="'mysql' has no key 'host'"):
            ev("mysql.host")

    def test_an_index_out_of_range_is_an_error(self) -> None:
        with pytest.raises(InvalidExpression, match="has no element '9'"):
            ev("items[9]")

    def test_reading_a_key_of_null_is_an_error(self) -> None:
        with pytest.raises(InvalidExpression, match="cannot read 'x' of 'nothing'"):
            ev("nothing.x")

    def test_a_variable_that_is_a_template_is_rendered_first(self) -> None:
        context = {"a": 1, "b": "${a + 1}", "c": "c=${b}"}
        assert render("${b}", context) == 2
        assert render("${c}", context) == "c=2"

    def test_templates_nested_in_a_mapping_variable_are_rendered(self) -> None:
        context = {"host": "db", "conf": {"url": "pg://${host}"}}
        assert render("${conf.url}", context) == "pg://db"

    def test_a_cycle_between_variables_is_an_error(self) -> None:
        with pytest.raises(InvalidExpression, match="cyclic reference to 'a'"):
            render("${a}", {"a": "${b}", "b": "x${a}"})

    def test_a_variable_referring_to_itself_is_an_error(self) -> None:
        with pytest.raises(InvalidExpression, match="cyclic reference to 'a'"):
            render("${a}", {"a": "${a}"})


class TestOperators:
    @pytest.mark.parametrize(
        ("expression", "expected"),
        [
            ("1 + 2 * 3", 7),
            ("(1 + 2) * 3", 9),
            ("10 - 4 - 3", 3),
            ("7 / 2", 3.5),
            ("8 / 2", 4),
            ("7 % 3", 1),
            ("-7 % 3", -1),
            ("-n", -7),
            ("--n", 7),
            ("f * 2", 5),
            ("1.5e1", 15),
        ],
    )
    def test_arithmetic(self, expression: str, expected: Any) -> None:
        assert ev(expression) == expected

    def test_whole_results_of_division_are_integers(self) -> None:
        assert isinstance(ev("8 / 2"), int)

    def test_plus_with_a_string_concatenates_like_javascript(self) -> None:
        assert ev("'a' + 1 + 2") == "a12"
        assert ev("1 + 2 + 'a'") == "3a"
        assert ev("s + nothing") == "hi"
        assert ev("'v' + t") == "vtrue"

    @pytest.mark.parametrize(
        ("expression", "expected"),
        [
            ("n == 7", True),
            ("n != 7", False),
            ("n === 7", True),
            ("n !== 8", True),
            ("n < 8", True),
            ("n <= 7", True),
            ("n > 7", False),
            ("n >= 8", False),
            ("'a' < 'b'", True),
            ("s == 'hi'", True),
            ("nothing == null", True),
            ("2 == 2.0", True),
        ],
    )
    def test_comparisons(self, expression: str, expected: bool) -> None:
        assert ev(expression) is expected

    def test_and_or_return_an_operand_with_javascript_truthiness(self) -> None:
        assert ev("nothing || 'default'") == "default"
        assert ev("s || 'default'") == "hi"
        assert ev("n && s") == "hi"
        assert ev("0 && s") == 0
        assert ev("'' || 0") == 0

    def test_and_or_short_circuit(self) -> None:
        assert ev("t || missing") is True
        assert ev("!t && missing") is False

    def test_not_follows_javascript_truthiness(self) -> None:
        assert ev("!0") is True
        assert ev("!''") is True
        assert ev("!nothing") is True
        assert ev("!mysql.empty") is False

    def test_ternary(self) -> None:
        assert ev("n > 5 ? 'big' : 'small'") == "big"
        assert ev("n > 50 ? 'big' : n > 5 ? 'medium' : 'small'") == "medium"

    def test_literals(self) -> None:
        assert ev("true") is True
        assert ev("false") is False
        assert ev("null") is None
        assert ev("'it\\'s'") == "it's"
        assert ev('"a\\nb"') == "a\nb"

    def test_arithmetic_on_non_numbers_is_an_error(self) -> None:
        with pytest.raises(InvalidExpression, match="operator '-' needs numbers"):
            ev("s - 1")

    def test_division_by_zero_is_an_error(self) -> None:
        with pytest.raises(InvalidExpression, match="division by zero"):
            ev("n / 0")

    def test_ordering_values_of_different_kinds_is_an_error(self) -> None:
        with pytest.raises(InvalidExpression, match="cannot compare"):
            ev("s < 1")


class TestFunctions:
    def test_json_stringify_and_parse(self) -> None:
        assert ev("JSON.stringify(mysql.ports)") == "[3306,3307]"
        assert ev("JSON.parse('{\"a\": [1]}').a[0]") == 1

    def test_json_parse_of_invalid_json_is_an_error(self) -> None:
        with pytest.raises(InvalidExpression, match=r"JSON\.parse"):
            ev("JSON.parse('{')")

    def test_string_and_number_conversions(self) -> None:
        assert ev("String(n) + String(t)") == "7true"
        assert ev("Number('42') + 1") == 43
        assert ev("Number('2.5')") == 2.5
        with pytest.raises(InvalidExpression, match="cannot convert 'x' to a number"):
            ev("Number('x')")

    def test_math_functions(self) -> None:
        assert ev("Math.floor(f)") == 2
        assert ev("Math.ceil(f)") == 3
        assert ev("Math.round(f)") == 3
        assert ev("Math.round(-2.5)") == -2
        assert ev("Math.min(3, n, 5)") == 3
        assert ev("Math.max(3, n, 5)") == 7

    def test_any_other_call_is_rejected_when_parsed(self) -> None:
        with pytest.raises(InvalidExpression, match="unknown function 'eval'"):
            check_template("${eval('1')}")
        with pytest.raises(InvalidExpression, match=r"unknown method 'upper' in 's\.upper\(\)'"):
            check_template("${s.upper()}")


class TestSyntaxCheck:
    @pytest.mark.parametrize(
        ("text", "reason"),
        [
            ("${}", "empty expression"),
            ("${a +}", "unexpected end of expression"),
            ("${a b}", "unexpected 'b' after a complete expression"),
            ("${a ? b}", "expected ':' but found the end"),
            ("${(a}", "expected ')' but found the end"),
            ("${a.}", "expected a name after '.' but found the end"),
            ("${a @ b}", "unexpected character '@'"),
            ("${a[1}", "expected ']' but found the end"),
            ("${__import__('os').system('x')}", "unknown function '__import__'"),
        ],
    )
    def test_invalid_expressions_are_reported_with_a_reason(self, text: str, reason: str) -> None:
        with pytest.raises(InvalidExpression) as caught:
            check_template("echo " + text)
        assert str(caught.value) == f"invalid expression '{text}': {reason}"

    def test_valid_templates_pass(self) -> None:
        check_template("echo ${a.b[0] + 'x'} $${not checked} ${unclosed")

    def test_syntax_errors_surface_when_rendering_too(self) -> None:
        with pytest.raises(InvalidExpression, match="unexpected end of expression"):
            render("${n +}", CONTEXT)


class TestMoment:
    """Moment.js's common calls on session times, as Digdag workflows write them."""

    LA = {"session_time": "2024-03-09T00:00:00-08:00", "timezone": "America/Los_Angeles"}

    def m(self, expression: str, **context: Any) -> Any:
        return render("${" + expression + "}", {**self.LA, **context})

    def test_the_digdag_idiom_formats_the_next_day(self) -> None:
        assert self.m("moment(session_time).add(1, 'days').format('YYYYMMDD')") == "20240310"

    def test_adding_days_across_dst_keeps_the_wall_clock_time(self) -> None:
        later = "moment(session_time).add(2, 'days').format()"
        assert self.m(later) == "2024-03-11T00:00:00-07:00"

    def test_adding_hours_across_dst_moves_the_instant(self) -> None:
        assert self.m("moment(session_time).add(48, 'hours').format()") == (
            "2024-03-11T01:00:00-07:00"
        )

    def test_a_wall_time_skipped_by_dst_lands_after_the_gap(self) -> None:
        assert self.m("moment('2024-03-10 02:30:00').format()") == "2024-03-10T03:30:00-07:00"

    def test_subtract_one_hour(self) -> None:
        assert self.m(
            "moment(session_time).subtract(1, 'hours').format('YYYY-MM-DD HH:mm:ss')"
        ) == ("2024-03-08 23:00:00")

    @pytest.mark.parametrize(
        ("start", "months", "expected"),
        [
            ("2024-01-31T00:00:00+00:00", 1, "2024-02-29"),
            ("2023-01-31T00:00:00+00:00", 1, "2023-02-28"),
            ("2024-03-31T00:00:00+00:00", -1, "2024-02-29"),
            ("2024-02-29T00:00:00+00:00", 12, "2025-02-28"),
        ],
    )
    def test_month_arithmetic_clamps_the_day_at_month_ends(
        self, start: str, months: int, expected: str
    ) -> None:
        text = f"moment(t).add({months}, 'months').format('YYYY-MM-DD')"
        assert self.m(text, t=start, timezone="UTC") == expected

    def test_every_documented_format_token(self) -> None:
        pattern = "YYYY YY MM M DD D HH H mm m ss s Z ZZ ddd dddd MMM MMMM X x"
        assert self.m(f"moment('2024-01-05T07:08:09+09:00').format('{pattern}')", timezone="") == (
            "2024 24 01 1 05 5 07 7 08 8 09 9 +09:00 +0900 Fri Friday Jan January"
            " 1704406089 1704406089000"
        )

    def test_brackets_escape_literal_text(self) -> None:
        assert self.m("moment(session_time).format('[day] D [of] MMMM')") == "day 9 of March"

    def test_tz_shows_the_same_instant_in_another_zone(self) -> None:
        assert self.m("moment(session_time).tz('Asia/Tokyo').format()") == (
            "2024-03-09T17:00:00+09:00"
        )

    def test_start_and_end_of_month_in_the_workflow_zone(self) -> None:
        assert self.m("moment(session_time).startOf('month').format()") == (
            "2024-03-01T00:00:00-08:00"
        )
        assert self.m("moment(session_time).endOf('month').format('YYYY-MM-DD HH:mm:ss Z')") == (
            "2024-03-31 23:59:59 -07:00"
        )

    def test_unix_and_iso_string(self) -> None:
        assert self.m("moment(session_time).unix()") == 1709971200
        assert self.m("moment(session_time).toISOString()") == "2024-03-09T08:00:00.000Z"

    def test_a_moment_alone_renders_as_iso_8601(self) -> None:
        assert self.m("moment(session_time)") == "2024-03-09T00:00:00-08:00"
        assert render("at ${moment(session_time).add(1,'d')}", self.LA) == (
            "at 2024-03-10T00:00:00-08:00"
        )

    def test_a_text_with_a_format_is_parsed_with_it(self) -> None:
        assert self.m("moment('20240105', 'YYYYMMDD').format('YYYY/MM/DD')") == "2024/01/05"

    def test_an_unknown_format_token_is_an_error_naming_the_expression(self) -> None:
        with pytest.raises(InvalidExpression, match=r"unknown token 'q'.*in '\$\{moment"):
            self.m("moment(session_time).format('YYYY q')")

    def test_an_unknown_unit_is_an_error(self) -> None:
        with pytest.raises(InvalidExpression, match="unknown unit 'fortnight'"):
            self.m("moment(session_time).add(1, 'fortnight')")

    def test_an_unknown_method_is_refused_when_parsed(self) -> None:
        with pytest.raises(InvalidExpression, match="unknown method 'fromNow'"):
            check_template("${moment(session_time).fromNow()}")

    def test_moment_without_a_time_is_refused_when_parsed_naming_what_to_write(self) -> None:
        with pytest.raises(InvalidExpression, match=r"moment\(\) needs a time"):
            self.m("moment()")
        with pytest.raises(InvalidExpression, match=r"write moment\(session_time\)"):
            check_template("${moment().format('YYYY')}")


class TestMethods:
    def test_string_methods(self) -> None:
        assert ev("'Hello World'.substring(0, 5).toUpperCase()") == "HELLO"
        assert ev("'a-b-c'.replace('-', '_')") == "a_b-c"
        assert ev("'a-b-c'.split('-')") == ["a", "b", "c"]
        assert ev("'2024-01-05'.split('-')[1]") == "01"
        assert ev("' x '.trim() + s.toLowerCase()") == "xhi"
        assert ev("'abc'.slice(-2)") == "bc"
        assert ev("'7'.padStart(3, '0')") == "007"

    def test_list_methods(self) -> None:
        assert ev("items.join('|')") == "a|b|c"
        assert ev("items.indexOf('b')") == 1
        assert ev("items.includes('z')") is False

    def test_a_method_the_value_lacks_is_an_error_naming_it(self) -> None:
        with pytest.raises(InvalidExpression, match="'n' is a number, which has no method 'trim'"):
            ev("n.trim()")

    def test_json_stringify_writes_compact_json(self) -> None:
        assert ev("JSON.stringify(mysql.ports)") == "[3306,3307]"


class TestLimits:
    def test_an_expression_over_4096_characters_is_refused(self) -> None:
        long = "1" + " + 1" * 1100
        with pytest.raises(InvalidExpression, match="over the limit of 4096"):
            check_template("${" + long + "}")

    def test_nesting_deeper_than_64_levels_is_refused(self) -> None:
        deep = "(" * 65 + "1" + ")" * 65
        with pytest.raises(InvalidExpression, match="nested more than 64 levels deep"):
            check_template("${" + deep + "}")

    def test_repeat_cannot_build_huge_strings(self) -> None:
        with pytest.raises(InvalidExpression, match="over 1000000"):
            ev("'ab'.repeat(10000000)")

    def test_replace_all_cannot_build_huge_strings(self) -> None:
        with pytest.raises(InvalidExpression, match="over 1000000"):
            ev("'x'.repeat(1000).replaceAll('x', 'y'.repeat(100000))")

    def test_concatenation_cannot_build_huge_strings(self) -> None:
        with pytest.raises(InvalidExpression, match="over 1000000"):
            ev("'x'.repeat(600000) + 'y'.repeat(600000)")

    def test_list_concat_cannot_build_huge_lists(self) -> None:
        many = "'x'.repeat(999999).split('')"
        with pytest.raises(InvalidExpression, match="over 1000000"):
            ev(f"{many}.concat({many})")

    def test_params_that_double_each_other_stop_at_the_string_limit(self) -> None:
        # Given params that each repeat the one before twice
        doubling = {"a": "${'x'.repeat(600000)}", "b": "${a}${a}", "c": "${b}${b}"}
        # Then rendering the last is refused instead of building gigabytes
        with pytest.raises(InvalidExpression, match="over 1000000"):
            render("${c}", doubling)

    def test_chained_products_become_doubles_instead_of_growing_without_bound(self) -> None:
        squares = {"n": "${" + "9" * 300 + "}", "m": "${n * n}", "k": "${m * m}"}
        assert render("${k}", squares) == float("inf")
        assert ev("9007199254740991 + 2") == 9007199254740992

    @pytest.mark.parametrize(
        "expression",
        [
            "moment('2024-01-01').add(1e300, 'hours')",
            "moment('2024-01-01').add(99999999999999, 'seconds')",
            "moment(1e300)",
        ],
    )
    def test_a_date_out_of_range_is_an_expression_error(self, expression: str) -> None:
        with pytest.raises(InvalidExpression, match="out of range"):
            ev(expression)
