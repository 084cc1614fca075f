from romanum.convert import from_roman, to_roman
