from wraptext.wrap import fill, wrap
