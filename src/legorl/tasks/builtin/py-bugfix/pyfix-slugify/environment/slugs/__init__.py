from slugs.slug import slugify, unique_slug
